// The machine's ceilings as benchmarks, so every bench run reports them beside the kernels:
// items_per_second is the rate (flops, ops or bytes).
#include <benchmark/benchmark.h>
#include <omp.h>

#include "ceilings/ceilings.hpp"
#include "ceilings/ceilings_kernels.hpp"

namespace {

void BM_Ceiling_Bf16Dot(benchmark::State& state) {
  double gflops = 0;
  for (auto _ : state)
    gflops = quantkv::ceilings::measure_bf16_dot_gflops(omp_get_max_threads(), 0.1);
  state.counters["GFLOPs"] = gflops;
}
BENCHMARK(BM_Ceiling_Bf16Dot)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_Ceiling_Int8Dot(benchmark::State& state) {
  double gops = 0;
  for (auto _ : state) gops = quantkv::ceilings::measure_int8_dot_gops(omp_get_max_threads(), 0.1);
  state.counters["GOPs"] = gops;
}
BENCHMARK(BM_Ceiling_Int8Dot)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_Ceiling_ReadBandwidth(benchmark::State& state) {
  double gbs = 0;
  for (auto _ : state) gbs = quantkv::ceilings::measure_read_gbs(omp_get_max_threads(), 0.2);
  state.counters["GBps"] = gbs;
}
BENCHMARK(BM_Ceiling_ReadBandwidth)->Iterations(2)->Unit(benchmark::kMillisecond);

}  // namespace
