// The execution context every operation takes: threads, memory budget, ISA override.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quantkv {

struct Context {
  // Worker threads for the CPU backend (OpenMP). 0 = all available (omp_get_max_threads()).
  // A count above max_num_threads() = max(available_cores(), kThreadCapFloor) is capped to it:
  // more threads than cores only time-slice (and thousands can exhaust the address space,
  // where libgomp exits the process); the floor of 16 keeps a small machine able to run (and
  // test) the thread splits of bigger ones. Negative counts are rejected.
  int num_threads = 0;
  // Upper bound on the indexer's score workspace; larger problems are processed in chunks
  // (contract §3; MAX's MLA_INDEX_SCORES_BUDGET_MB defaults to 512).
  std::size_t scores_budget_bytes = std::size_t(512) << 20;
  // Upper bound on the fused experts' per-route workspace (w2's fp32 rows, T * k * H * 4
  // bytes): larger calls run in chunks of consecutive tokens (at least one token each) with the
  // same bits, at the cost of an fp32 [T, H] staging of y and of reading the routed experts'
  // weights once per chunk.
  std::size_t experts_budget_bytes = std::size_t(256) << 20;
  // CUDA stream (cudaStream_t) for the CUDA backend; nullptr = the default stream.
  void* cuda_stream = nullptr;
};

// Cores this process may run on (omp_get_num_procs(): its CPU affinity mask), 1 without OpenMP.
int available_cores();

// The floor of the thread cap: a positive ctx.num_threads is capped at
// max(available_cores(), kThreadCapFloor), not at the cores alone. More threads than cores only
// time-slice (each gets a share of a core; results never depend on the count), but a 2-core
// machine must still be able to run the 3-, 5- or 16-thread splits that the determinism tests
// ask for; thousands of threads (4096) stay capped.
inline constexpr int kThreadCapFloor = 16;

// The most threads an operation uses: max(available_cores(), kThreadCapFloor).
int max_num_threads();

// The thread count an operation will use for `ctx`: 0 resolves to the OpenMP default, a
// positive count is capped at max_num_threads().
int resolved_num_threads(const Context& ctx);

}  // namespace quantkv
