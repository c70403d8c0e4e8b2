// Internal: exact per-row top-k selection in the indexer's order (contract §3): score descending,
// then position ascending; NaN below every number (NaNs by position); -0 ties with +0.
//
// Selection, not sorting (docs/indexer.md, "Top-k"):
//  1. long rows: a 1024-element sample gives a threshold that about 2-3 n scores pass; one
//     vectorised pass keeps the positions of the scores >= it (in position order). If fewer
//     than n pass, the whole row is used instead — the filter only ever narrows, it never
//     decides.
//  2. radix select (8-bit digits, most significant first) on order-preserving keys finds the
//     n-th key K; the keys > K and the first (by position) of those == K are selected.
//  3. only those n are sorted: a stable LSD radix sort by key, descending, so equal keys stay
//     in position order.
// Every buffer grows with the row; there is no fixed-size candidate buffer to overflow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quantkv/formats.hpp"

namespace quantkv::cpu {

// Order-preserving map of a score to an unsigned key: larger score -> larger key; every NaN
// -> 0 (below -inf's key); -0 and +0 -> the same key.
inline uint32_t score_order_key(float s) {
  const uint32_t u = detail::float_bits(s);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0;
  if (a == 0) return 0x80000000u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Per-thread buffers of topk_row; they grow to the longest row seen.
struct TopkScratch {
  std::vector<uint32_t> keys;      // keys of the candidates
  std::vector<int32_t> positions;  // candidate positions (filtered rows)
  std::vector<uint32_t> narrow;    // radix-select working set
  std::vector<uint64_t> selected;  // (key << 32 | position) of the chosen n
  std::vector<uint64_t> sorted;    // ping-pong buffer of the sort
  // Sizes every buffer for rows up to `len` (may throw std::bad_alloc; topk_row then never
  // allocates for such rows).
  void reserve(int64_t len, int64_t top_k);
};

// Bytes TopkScratch reaches for a row of `len` scores and `top_k` (for memory budgets).
std::size_t topk_scratch_bytes(int64_t len, int64_t top_k);

// out[0, top_k): the positions of the n = min(top_k, len) best scores of scores[0, len) in
// the order above, then -1.
void topk_row(const float* scores, int64_t len, int64_t top_k, int32_t* out, TopkScratch* scratch);

// Positions j < len with scores[j] >= threshold (never NaN), ascending; returns the count.
// `out` holds len + 16 entries. One variant per ISA.
using FilterFn = int64_t (*)(const float* scores, int64_t len, float threshold, int32_t* out);
int64_t filter_at_least_scalar(const float* scores, int64_t len, float threshold, int32_t* out);
int64_t filter_at_least_avx512(const float* scores, int64_t len, float threshold, int32_t* out);

}  // namespace quantkv::cpu
