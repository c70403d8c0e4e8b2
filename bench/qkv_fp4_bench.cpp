// The fused QKV projection (contract §4) on Llama-like shapes: effective GFLOP/s (2 M N K / time),
// weight GB/s (the API's weight bytes: data + block scales), and their ratios to the int8-dot
// (fp4) or bf16-dot (MXFP8) ceiling and to the read bandwidth, measured in the same run.
//   BM_QkvFused/<format>/<model>/M       prepared weight (the steady state of a model)
//   BM_QkvFusedPlain/<format>/<model>/M  the plain entry point (repacks the weight each call)
//   BM_QkvPrepare/<format>/<model>       prepare_qkv_weights alone
//   BM_QkvWeightOnly/<format>/<model>/M  bf16 activations on the prepared weight (W4A16 /
//                                        W8A16), against the bf16-dot ceiling
// At M = 1 also best_GBs (the fastest call's weight bytes / its time), best_read_GBs (the read
// ceiling measured again after the calls, the best so far) and best_of_read_bw, their ratio.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ceilings/ceilings.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/scale_layout.hpp"

namespace {

using namespace quantkv;

struct Model {
  const char* name;
  int64_t k, q_heads, kv_heads, head;
};
constexpr Model kLlama8B{"llama3_8b", 4096, 32, 8, 128};
constexpr Model kLlama70B{"llama_70b", 8192, 64, 8, 128};

const ceilings::Ceilings& machine_ceilings() {
  static const ceilings::Ceilings c = [] {
    ceilings::Ceilings x;
    const int threads = omp_get_max_threads();
    x.int8_gops = ceilings::measure_int8_dot_gops(threads);
    x.bf16_gflops = ceilings::measure_bf16_dot_gflops(threads);
    x.read_gbs = ceilings::measure_read_gbs(threads);
    return x;
  }();
  return c;
}

// The weight of one (format, model), random bytes, in enough copies (raw and prepared) to
// exceed the last-level cache, so every call streams its weight from memory as a model's
// layers do. Only the latest (format, model) is kept.
constexpr double kRotateBytes = 320e6;

struct Weight {
  int64_t n = 0, k = 0;
  std::vector<std::vector<uint8_t>> data, scales;  // [copy]
  std::vector<PreparedQkvWeights> prepared;        // [copy]
  std::size_t copies() const { return data.size(); }
  std::size_t bytes() const { return data[0].size() + scales[0].size(); }
};

uint8_t random_scale(BlockFormat f, std::mt19937_64& rng) {
  return has_e8m0_scales(f) ? uint8_t(120 + rng() % 12) : uint8_t(0x28 + rng() % 40);
}
uint8_t random_data(BlockFormat f, std::mt19937_64& rng) {
  uint8_t b = uint8_t(rng());
  if (f == BlockFormat::kMXFP8 && (b & 0x7F) == 0x7F) b = 0x3F;
  return b;
}

Weight& weight_for(BlockFormat f, const Model& m) {
  static std::pair<int, std::string> key{-1, ""};
  static std::unique_ptr<Weight> slot;
  if (key != std::make_pair(int(f), std::string(m.name))) {
    slot.reset();
    key = {int(f), m.name};
    slot = std::make_unique<Weight>();
    Weight& w = *slot;
    w.k = m.k;
    w.n = (m.q_heads + 2 * m.kv_heads) * m.head;
    const int64_t kb = m.k / sf_vector_size(f);
    std::mt19937_64 rng(42);
    std::vector<uint8_t> data(std::size_t(w.n * row_bytes(f, m.k)));
    for (auto& b : data) b = random_data(f, rng);
    std::vector<uint8_t> scales(std::size_t(swizzled_scale_elements(w.n, kb)), 0);
    for (int64_t r = 0; r < w.n; ++r)
      for (int64_t c = 0; c < kb; ++c)
        scales[swizzled_scale_offset(r, c, kb)] = random_scale(f, rng);
    const std::size_t copies = std::size_t(kRotateBytes / double(data.size() + scales.size())) + 1;
    for (std::size_t i = 0; i < copies; ++i) {
      w.data.push_back(data);
      w.scales.push_back(scales);
      w.prepared.emplace_back();
      const Status s = prepare_qkv_weights(
          make_view<const uint8_t>(w.data.back().data(), w.n, row_bytes(f, m.k)),
          make_view<const uint8_t, 5>(w.scales.back().data(), swizzled_scale_shape(w.n, kb)), f,
          &w.prepared.back(), Context{});
      if (!s.ok()) std::abort();
    }
  }
  return *slot;
}

// Activations, cache and output of one call with M rows (one sequence, cache_len 0).
struct Call {
  int64_t m = 0;
  std::vector<uint8_t> hidden, scales;
  std::vector<uint32_t> offsets;
  std::vector<uint16_t> out;
  PagedKVCache cache;
};

std::unique_ptr<Call> make_call(BlockFormat f, const Model& model, int64_t m) {
  auto c = std::make_unique<Call>();
  c->m = m;
  std::mt19937_64 rng(7);
  const int64_t kb = model.k / sf_vector_size(f);
  c->hidden.resize(std::size_t(m * row_bytes(f, model.k)));
  for (auto& b : c->hidden) b = random_data(f, rng);
  c->scales.assign(std::size_t(swizzled_scale_elements(m, kb)), 0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < kb; ++j)
      c->scales[swizzled_scale_offset(r, j, kb)] = random_scale(f, rng);
  c->offsets = {0, uint32_t(m)};
  c->out.resize(std::size_t(m * model.q_heads * model.head));
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kBF16;
  cfg.page_size = 128;
  cfg.num_heads = model.kv_heads;
  cfg.head_size = model.head;
  cfg.num_blocks = (m + 127) / 128;
  cfg.max_pages_per_seq = cfg.num_blocks;
  if (!PagedKVCache::create(cfg, 1, &c->cache).ok() || !c->cache.reserve(0, m).ok()) std::abort();
  return c;
}

void report(benchmark::State& state, BlockFormat f, int64_t m, const Weight& w,
            const ceilings::BestRate& best, bool bf16_activations = false) {
  const auto& ceil = machine_ceilings();
  const double flops = 2.0 * double(m) * double(w.n) * double(w.k);
  const double weight_bytes = double(w.bytes());
  const double iters = double(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["weight_GBs"] =
      benchmark::Counter(weight_bytes * iters / 1e9, benchmark::Counter::kIsRate);
  const double dot =
      f == BlockFormat::kMXFP8 || bf16_activations ? ceil.bf16_gflops : ceil.int8_gops;
  // Rates divided by the ceilings: kIsRate divides by the measured time.
  state.counters["of_dot_ceiling"] =
      benchmark::Counter(flops * iters / 1e9 / dot, benchmark::Counter::kIsRate);
  state.counters["of_read_bw"] =
      benchmark::Counter(weight_bytes * iters / 1e9 / ceil.read_gbs, benchmark::Counter::kIsRate);
  state.counters["dot_ceiling_G"] = dot;
  state.counters["read_GBs"] = ceil.read_gbs;
  if (m == 1) {  // decode: the fastest call against the best read window (ceilings::BestRate)
    const double read = ceilings::best_read_gbs(omp_get_max_threads(), ceil.read_gbs);
    state.counters["best_GBs"] = best.gbs;
    state.counters["best_read_GBs"] = read;
    state.counters["best_of_read_bw"] = best.gbs / read;
  }
}

void BM_QkvFused(benchmark::State& state, BlockFormat f, Model model, bool prepared) {
  const int64_t m = state.range(0);
  Weight& w = weight_for(f, model);
  machine_ceilings();
  auto call = make_call(f, model, m);
  const int64_t kb = model.k / sf_vector_size(f);
  const auto hidden = make_view<const uint8_t>(call->hidden.data(), m, row_bytes(f, model.k));
  const auto iscale = make_view<const uint8_t, 5>(call->scales.data(), swizzled_scale_shape(m, kb));
  const auto offs = make_view<const uint32_t>(call->offsets.data(), int64_t(2));
  const auto out =
      make_view(reinterpret_cast<bfloat16*>(call->out.data()), m, model.q_heads * model.head);
  const PagedKVCacheCollection kv = call->cache.view();
  const Context ctx;
  std::size_t copy = 0;
  ceilings::BestRate best;
  for (auto _ : state) {
    copy = (copy + 1) % w.copies();
    const auto weight = make_view<const uint8_t>(w.data[copy].data(), w.n, row_bytes(f, model.k));
    const auto wscale =
        make_view<const uint8_t, 5>(w.scales[copy].data(), swizzled_scale_shape(w.n, kb));
    best.start();
    const Status s =
        prepared ? generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                       hidden, offs, w.prepared[copy], iscale, SectionScales{}, kv, 0, out, ctx)
                 : generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                       hidden, offs, weight, iscale, wscale, 1.0f, kv, 0, out, f, ctx);
    best.stop(double(w.bytes()));
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::ClobberMemory();
  }
  report(state, f, m, w, best);
}

void BM_QkvWeightOnly(benchmark::State& state, BlockFormat f, Model model) {
  const int64_t m = state.range(0);
  Weight& w = weight_for(f, model);
  machine_ceilings();
  auto call = make_call(f, model, m);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal;
  std::vector<bfloat16> hidden(std::size_t(m * model.k));
  for (auto& h : hidden) h.bits = float_to_bf16(normal(rng));
  const auto hv = make_view<const bfloat16>(hidden.data(), m, model.k);
  const auto offs = make_view<const uint32_t>(call->offsets.data(), int64_t(2));
  const auto out =
      make_view(reinterpret_cast<bfloat16*>(call->out.data()), m, model.q_heads * model.head);
  const PagedKVCacheCollection kv = call->cache.view();
  std::size_t copy = 0;
  ceilings::BestRate best;
  for (auto _ : state) {
    copy = (copy + 1) % w.copies();
    best.start();
    const Status s = fused_qkv_matmul_weight_only(hv, offs, w.prepared[copy], SectionScales{}, kv,
                                                  0, out, Context{});
    best.stop(double(w.bytes()));
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::ClobberMemory();
  }
  report(state, f, m, w, best, /*bf16_activations=*/true);
}

void BM_QkvPrepare(benchmark::State& state, BlockFormat f, Model model) {
  Weight& w = weight_for(f, model);
  const int64_t kb = model.k / sf_vector_size(f);
  std::size_t copy = 0;
  for (auto _ : state) {
    copy = (copy + 1) % w.copies();
    const auto weight = make_view<const uint8_t>(w.data[copy].data(), w.n, row_bytes(f, model.k));
    const auto wscale =
        make_view<const uint8_t, 5>(w.scales[copy].data(), swizzled_scale_shape(w.n, kb));
    if (!prepare_qkv_weights(weight, wscale, f, &w.prepared[copy], Context{}).ok()) {
      state.SkipWithError("prepare");
    }
  }
  state.counters["weight_GBs"] = benchmark::Counter(
      double(w.bytes()) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void register_all() {
  struct Combo {
    BlockFormat f;
    Model model;
    std::vector<int64_t> ms;
  };
  const std::vector<Combo> combos = {
      {BlockFormat::kNVFP4, kLlama8B, {1, 16, 128, 512, 2048}},
      {BlockFormat::kNVFP4, kLlama70B, {1, 16, 128, 512, 2048}},
      {BlockFormat::kMXFP4, kLlama8B, {1, 16, 512}},
      {BlockFormat::kMXFP8, kLlama70B, {1, 16, 512, 2048}},
  };
  for (const Combo& c : combos) {
    const std::string tag = std::string(block_format_name(c.f)) + "/" + c.model.name;
    auto* b = benchmark::RegisterBenchmark(("BM_QkvFused/" + tag).c_str(), BM_QkvFused, c.f,
                                           c.model, true);
    for (int64_t m : c.ms) b->Arg(m);
    b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
    auto* p = benchmark::RegisterBenchmark(("BM_QkvFusedPlain/" + tag).c_str(), BM_QkvFused, c.f,
                                           c.model, false);
    p->Arg(1)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
    benchmark::RegisterBenchmark(("BM_QkvPrepare/" + tag).c_str(), BM_QkvPrepare, c.f, c.model)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.3);
    auto* wo = benchmark::RegisterBenchmark(("BM_QkvWeightOnly/" + tag).c_str(), BM_QkvWeightOnly,
                                            c.f, c.model);
    for (int64_t m : c.ms) wo->Arg(m);
    wo->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
  }
}
const int kRegistered = (register_all(), 0);

}  // namespace
