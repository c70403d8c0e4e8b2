// The companion quantisers: quantize_dynamic_block_scaled (NVFP4 / MXFP4 / MXFP8, bf16 and
// f32 activations), indexer_q_prepare and indexer_k_store, at decode (M = 16) and prefill
// (M = 512) shapes with K = 4096 / 8192. They stream: each input byte is read once and each
// output byte written once. Counters:
//   GBps        bytes read + written / time
//   ceiling     the read bandwidth measured in the same run (bench/ceilings), GB/s
//   of_ceiling  GBps / ceiling
// Arguments: M, K, format (0 NVFP4, 1 MXFP4, 2 MXFP8), input (0 f32, 1 bf16).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ceilings/ceilings.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace {

using namespace quantkv;

double read_ceiling() {
  static const double gbs = ceilings::measure_read_gbs(omp_get_max_threads());
  return gbs;
}

std::vector<float> normal_values(int64_t n) {
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

void report(benchmark::State& state, double bytes) {
  const double gbs = bytes * double(state.iterations());
  state.counters["GBps"] = benchmark::Counter(gbs * 1e-9, benchmark::Counter::kIsRate);
  state.counters["ceiling"] = read_ceiling();
  state.counters["of_ceiling"] =
      benchmark::Counter(gbs * 1e-9 / read_ceiling(), benchmark::Counter::kIsRate);
}

void BM_Quantize(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1);
  const auto f = static_cast<BlockFormat>(state.range(2));
  const bool bf16 = state.range(3) != 0;
  const std::vector<float> x = normal_values(m * k);
  std::vector<bfloat16> xb(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i].bits = float_to_bf16(x[i]);
  const int64_t kb = k / sf_vector_size(f);
  std::vector<uint8_t> data(static_cast<std::size_t>(m * row_bytes(f, k)));
  std::vector<uint8_t> scales(static_cast<std::size_t>(swizzled_scale_elements(m, kb)));
  const auto dv = make_view(data.data(), m, row_bytes(f, k));
  const auto sv = make_view<uint8_t, 5>(scales.data(), swizzled_scale_shape(m, kb));
  read_ceiling();
  for (auto _ : state) {
    const Status s = bf16
                         ? quantize_dynamic_block_scaled(make_view<const bfloat16>(xb.data(), m, k),
                                                         2.0f, f, dv, sv, Context{})
                         : quantize_dynamic_block_scaled(make_view<const float>(x.data(), m, k),
                                                         2.0f, f, dv, sv, Context{});
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(data.data());
  }
  state.SetLabel(std::string(block_format_name(f)) + (bf16 ? " bf16" : " f32"));
  report(state, double(m * k) * (bf16 ? 2.0 : 4.0) + double(data.size() + scales.size()));
}
BENCHMARK(BM_Quantize)
    ->ArgsProduct({{16, 512}, {4096, 8192}, {0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// Q prepare at DeepSeek-V3.2's indexer shape: H = 64 heads of D = 128, T tokens.
void BM_IndexerQPrepare(benchmark::State& state) {
  const int64_t T = state.range(0), H = 64, D = 128;
  const std::vector<float> q = normal_values(T * H * D), w = normal_values(T * H);
  std::vector<float8_e4m3fn> q8(q.size());
  std::vector<float> qs(w.size());
  read_ceiling();
  for (auto _ : state) {
    const Status s = indexer_q_prepare(
        make_view<const float>(q.data(), T, H, D), make_view<const float>(w.data(), T, H),
        make_view(q8.data(), T, H, D), make_view(qs.data(), T, H), ScaleMode::kFloat, Context{});
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(q8.data());
  }
  report(state, double(T * H * D) * 5.0 + double(T * H) * 8.0);
}
BENCHMARK(BM_IndexerQPrepare)->Arg(16)->Arg(512)->Unit(benchmark::kMicrosecond);

// K store of T new tokens (D = 128, page 64) into one sequence's cache, f32 or bf16 rows.
void BM_IndexerKStore(benchmark::State& state) {
  const int64_t T = state.range(0), D = 128, page = 64;
  const bool bf16 = state.range(1) != 0;
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kE4M3;
  cfg.kv_dim = 1;
  cfg.num_layers = 1;
  cfg.page_size = page;
  cfg.num_heads = 1;
  cfg.head_size = D;
  cfg.scale_granularity = D;
  cfg.batch_size = 1;
  cfg.num_blocks = T / page + 2;
  cfg.max_pages_per_seq = T / page + 1;
  PagedKVCache cache;
  if (!PagedKVCache::create(cfg, 7, &cache).ok() || !cache.reserve(0, T).ok()) {
    state.SkipWithError("cache");
    return;
  }
  const std::vector<float> x = normal_values(T * D);
  std::vector<bfloat16> xb(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xb[i].bits = float_to_bf16(x[i]);
  const std::vector<uint32_t> offs = {0, uint32_t(T)};
  const auto ov = make_view<const uint32_t>(offs.data(), 2);
  read_ceiling();
  for (auto _ : state) {
    const Status s = bf16 ? indexer_k_store(make_view<const bfloat16>(xb.data(), T, D), ov,
                                            cache.view(), 0, ScaleMode::kFloat, Context{})
                          : indexer_k_store(make_view<const float>(x.data(), T, D), ov,
                                            cache.view(), 0, ScaleMode::kFloat, Context{});
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
  }
  state.SetLabel(bf16 ? "bf16" : "f32");
  report(state, double(T * D) * ((bf16 ? 2.0 : 4.0) + 1.0) + double(T) * 4.0);
}
BENCHMARK(BM_IndexerKStore)->ArgsProduct({{16, 4096}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
