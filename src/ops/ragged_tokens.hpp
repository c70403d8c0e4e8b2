// Internal: the loop over the new tokens of a ragged batch shared by the ops that write one
// token at a time into the paged cache with an fp32 scratch row (fused_qk_rope_ragged, the K
// store's front end).
#pragma once

#include <cstdint>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "quantkv/paged_kv.hpp"

namespace quantkv::detail {

// Runs fn(t, b, pos, row) for every new token t (sequence b, cache position pos =
// cache_len[b] + t - offs[b]) on `threads` OpenMP threads (static schedule), each with its own
// scratch row of `row_len` floats. Every token is written by exactly one call, so the result
// does not depend on the thread count.
template <typename Fn>
void for_each_new_token(const PagedKVCacheCollection& c, const TensorView<const uint32_t, 1>& offs,
                        int threads, int64_t row_len, Fn fn) {
  const std::vector<int32_t> seq = row_to_sequence(offs);
  const int64_t T = int64_t(seq.size());
  // The scratch rows are allocated before the parallel region: an allocation failure inside it
  // could not become a Status.
  std::vector<float> rows(static_cast<size_t>(threads) * static_cast<size_t>(row_len));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#if defined(_OPENMP)
    float* row = rows.data() + int64_t(omp_get_thread_num()) * row_len;
#else
    float* row = rows.data();
#endif
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t b = seq[size_t(t)];
      fn(t, int64_t(b), int64_t(c.cache_lengths(b)) + t - int64_t(offs(b)), row);
    }
  }
}

}  // namespace quantkv::detail
