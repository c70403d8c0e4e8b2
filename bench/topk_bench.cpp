// Top-k of one row: 2048 of 128K random floats, the library's selection against
// std::partial_sort and std::nth_element + sort on the same rows, all producing the same
// order (score descending, position ascending). Rows rotate through 16 x 512 KiB so the
// data is not always hot in L1/L2. items_per_second = scores examined per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/topk.hpp"

namespace {

constexpr int64_t kLen = 128 * 1024, kTopK = 2048, kRows = 16;

const std::vector<float>& rows() {
  static const std::vector<float> data = [] {
    std::vector<float> v(std::size_t(kLen * kRows));
    std::mt19937 rng(3);
    std::normal_distribution<float> dist;
    for (float& x : v) x = dist(rng);
    return v;
  }();
  return data;
}

void BM_Topk_Library(benchmark::State& state) {
  const float* data = rows().data();
  quantkv::cpu::TopkScratch scratch;
  std::vector<int32_t> out(kTopK);
  int64_t r = 0;
  for (auto _ : state) {
    quantkv::cpu::topk_row(data + (r++ % kRows) * kLen, kLen, kTopK, out.data(), &scratch);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kLen);
}
BENCHMARK(BM_Topk_Library)->Unit(benchmark::kMicrosecond);

template <typename Select>
void run_std(benchmark::State& state, Select select) {
  const float* data = rows().data();
  std::vector<int32_t> idx(kLen);
  int64_t r = 0;
  for (auto _ : state) {
    const float* s = data + (r++ % kRows) * kLen;
    std::iota(idx.begin(), idx.end(), 0);
    auto better = [s](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
    select(idx, better);
    benchmark::DoNotOptimize(idx.data());
  }
  state.SetItemsProcessed(state.iterations() * kLen);
}

void BM_Topk_StdPartialSort(benchmark::State& state) {
  run_std(state, [](std::vector<int32_t>& idx, auto better) {
    std::partial_sort(idx.begin(), idx.begin() + kTopK, idx.end(), better);
  });
}
BENCHMARK(BM_Topk_StdPartialSort)->Unit(benchmark::kMicrosecond);

void BM_Topk_StdNthElementSort(benchmark::State& state) {
  run_std(state, [](std::vector<int32_t>& idx, auto better) {
    std::nth_element(idx.begin(), idx.begin() + kTopK - 1, idx.end(), better);
    std::sort(idx.begin(), idx.begin() + kTopK, better);
  });
}
BENCHMARK(BM_Topk_StdNthElementSort)->Unit(benchmark::kMicrosecond);

}  // namespace
