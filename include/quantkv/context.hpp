// The execution context every operation takes: threads, memory budget, ISA override.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quantkv {

struct Context {
  // Worker threads for the CPU backend (OpenMP). 0 = all available (omp_get_max_threads()).
  int num_threads = 0;
  // Upper bound on the indexer's score workspace; larger problems are processed in chunks
  // (SPEC §3; MAX's MLA_INDEX_SCORES_BUDGET_MB defaults to 512).
  std::size_t scores_budget_bytes = std::size_t(512) << 20;
  // CUDA stream (cudaStream_t) for the CUDA backend; nullptr = the default stream.
  void* cuda_stream = nullptr;
};

// The thread count an operation will use for `ctx` (resolves 0 to the OpenMP default).
int resolved_num_threads(const Context& ctx);

}  // namespace quantkv
