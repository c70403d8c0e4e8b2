// The fused experts (quantkv/moe.hpp) on two real layers' shapes, with random top-k routing from
// a fixed seed, and the machine's ceilings measured in the same run at the same thread count:
//   BM_Moe/<model>/<mode>/T/threads
//     gpt_oss_20b    H 2880, I 2880, E 32, top-4, MXFP4, interleaved gate/up, SwiGLU-OAI, biases
//     qwen3_30b_a3b  H 2048, I 768, E 128, top-8, NVFP4, halves, SiLU
//     mode w4a16 (weight-only, bf16 x and h) or w4a4 (x and h quantised per routed row)
// Counters: routed (distinct experts a call touches, averaged over the routings), routed_MB (their
// weight bytes as checkpoints store them: codes + 1-byte block scales), weight_GBs and of_read_bw
// (routed bytes / time / the read-bandwidth ceiling: the decode figure), GFLOPs and of_dot_ceiling
// (2 T k (2I H + H I) / time / the bf16-dot (w4a16) or int8-dot (w4a4) ceiling the linear layer's
// benchmarks use: the prefill figure), read_GBs and dot_ceiling_G (the ceilings themselves).
// Three copies of the layer's prepared experts (over 1 GB, several times the last-level cache) and
// 16 routings are rotated call by call, so the routed experts stream from memory as they would in
// a model whose other layers evict them.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ceilings/ceilings.hpp"
#include "quantkv/moe.hpp"

namespace {

using namespace quantkv;

struct MoeModel {
  const char* name;
  int64_t hidden, inter, experts, top_k;
  BlockFormat format;
  bool gpt_oss;  // interleaved gate/up, SwiGLU-OAI and biases; else halves, SiLU, no biases
};
constexpr MoeModel kGptOss20B{"gpt_oss_20b", 2880, 2880, 32, 4, BlockFormat::kMXFP4, true};
constexpr MoeModel kQwen3A3B{"qwen3_30b_a3b", 2048, 768, 128, 8, BlockFormat::kNVFP4, false};

const ceilings::Ceilings& ceilings_at(int threads) {
  static std::map<int, ceilings::Ceilings> measured;
  auto it = measured.find(threads);
  if (it == measured.end()) {
    ceilings::Ceilings c;
    c.int8_gops = ceilings::measure_int8_dot_gops(threads);
    c.bf16_gflops = ceilings::measure_bf16_dot_gflops(threads);
    c.read_gbs = ceilings::measure_read_gbs(threads);
    it = measured.emplace(threads, c).first;
  }
  return it->second;
}

constexpr std::size_t kCopies = 3;

// One model's layer: random codes and scales, prepared once and copied; only the latest model
// is kept.
struct Layer {
  MoeModel model{};
  std::vector<PreparedExperts> copies;
  std::vector<float> b13, b2;  // [E, 2I], [E, H]
  double expert_bytes = 0;     // codes + block scales of one expert's w13 and w2
};

void fill_random(std::vector<uint8_t>& v, std::mt19937_64& rng) {
  for (std::size_t i = 0; i < v.size(); i += 8) {
    const uint64_t r = rng();
    for (std::size_t j = 0; j < 8 && i + j < v.size(); ++j) v[i + j] = uint8_t(r >> (8 * j));
  }
}

void fill_scales(BlockFormat f, std::vector<uint8_t>& v, std::mt19937_64& rng) {
  for (auto& b : v)
    b = f == BlockFormat::kNVFP4 ? uint8_t(0x28 + rng() % 40) : uint8_t(120 + rng() % 12);
}

Layer& layer_for(const MoeModel& m) {
  static std::unique_ptr<Layer> slot;
  if (slot != nullptr && std::string(slot->model.name) == m.name) return *slot;
  slot.reset();
  auto l = std::make_unique<Layer>();
  l->model = m;
  const BlockFormat f = m.format;
  const int sfv = sf_vector_size(f);
  const int64_t e = m.experts, h = m.hidden, i = m.inter;
  std::mt19937_64 rng(42);
  std::vector<uint8_t> w13(std::size_t(e * 2 * i * row_bytes(f, h)));
  std::vector<uint8_t> s13(std::size_t(e * 2 * i * (h / sfv)));
  std::vector<uint8_t> w2(std::size_t(e * h * row_bytes(f, i)));
  std::vector<uint8_t> s2(std::size_t(e * h * (i / sfv)));
  fill_random(w13, rng);
  fill_random(w2, rng);
  fill_scales(f, s13, rng);
  fill_scales(f, s2, rng);
  l->expert_bytes = double(w13.size() + s13.size() + w2.size() + s2.size()) / double(e);
  std::vector<float> x_global(std::size_t(e), f == BlockFormat::kNVFP4 ? 400.0f : 1.0f);
  std::vector<float> h_global(std::size_t(e), f == BlockFormat::kNVFP4 ? 200.0f : 1.0f);
  std::vector<float> alpha(std::size_t(e), f == BlockFormat::kNVFP4 ? 0.01f : 1.0f);
  ExpertsSource s;
  s.w13 = make_view<const uint8_t>(w13.data(), e, 2 * i, row_bytes(f, h));
  s.w13_scale = make_view<const uint8_t>(s13.data(), e, 2 * i, h / sfv);
  s.w2 = make_view<const uint8_t>(w2.data(), e, h, row_bytes(f, i));
  s.w2_scale = make_view<const uint8_t>(s2.data(), e, h, i / sfv);
  s.format = f;
  s.w13_alpha = make_view<const float>(alpha.data(), e);
  s.w2_alpha = make_view<const float>(alpha.data(), e);
  s.x_global = make_view<const float>(x_global.data(), e);
  s.h_global = make_view<const float>(h_global.data(), e);
  l->copies.resize(kCopies);
  if (!prepare_experts(s, &l->copies[0], Context{}).ok()) std::abort();
  for (std::size_t c = 1; c < kCopies; ++c) l->copies[c] = l->copies[0];
  std::normal_distribution<float> normal(0.0f, 0.1f);
  l->b13.resize(std::size_t(e * 2 * i));
  l->b2.resize(std::size_t(e * h));
  for (auto& b : l->b13) b = normal(rng);
  for (auto& b : l->b2) b = normal(rng);
  slot = std::move(l);
  return *slot;
}

// Random routings of T tokens: k distinct experts per token (as a router's top-k), weights that
// sum to 1.
constexpr int kRoutings = 16;
struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int64_t distinct = 0;
};

std::vector<Routing> make_routings(const MoeModel& m, int64_t t) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<float> uniform(0.1f, 1.0f);
  std::vector<Routing> out(kRoutings);
  std::vector<int32_t> all(std::size_t(m.experts));
  for (Routing& r : out) {
    std::set<int32_t> seen;
    for (int64_t tok = 0; tok < t; ++tok) {
      std::iota(all.begin(), all.end(), 0);
      float sum = 0.0f;
      for (int64_t j = 0; j < m.top_k; ++j) {  // a partial Fisher-Yates shuffle
        const auto pick = std::size_t(j + int64_t(rng() % uint64_t(m.experts - j)));
        std::swap(all[std::size_t(j)], all[pick]);
        r.ids.push_back(all[std::size_t(j)]);
        seen.insert(all[std::size_t(j)]);
        r.weights.push_back(uniform(rng));
        sum += r.weights.back();
      }
      for (int64_t j = 0; j < m.top_k; ++j) r.weights[std::size_t(tok * m.top_k + j)] /= sum;
    }
    r.distinct = int64_t(seen.size());
  }
  return out;
}

void BM_Moe(benchmark::State& state, MoeModel model, bool quantised) {
  const int64_t t = state.range(0);
  const int threads = int(state.range(1));
  const ceilings::Ceilings& ceil = ceilings_at(threads);
  Layer& l = layer_for(model);
  const std::vector<Routing> routings = make_routings(model, t);
  const int64_t h = model.hidden, k = model.top_k;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<bfloat16> x(std::size_t(t * h));
  for (auto& v : x) v.bits = float_to_bf16(normal(rng));
  std::vector<bfloat16> y(std::size_t(t * h));
  FusedExpertsArgs a;
  a.x = make_view<const bfloat16>(x.data(), t, h);
  a.quantize_activations = quantised;
  if (model.gpt_oss) {
    a.gate_up = GateUpLayout::kInterleaved;
    a.activation = MoeActivation::kSwigluOai;
    a.w13_bias = make_view<const float>(l.b13.data(), model.experts, 2 * model.inter);
    a.w2_bias = make_view<const float>(l.b2.data(), model.experts, h);
  }
  a.y = make_view(y.data(), t, h);
  Context ctx;
  ctx.num_threads = threads;
  std::size_t call = 0;
  for (auto _ : state) {
    const Routing& r = routings[call % routings.size()];
    a.experts = &l.copies[call % l.copies.size()];
    a.topk_ids = make_view<const int32_t>(r.ids.data(), t, k);
    a.topk_weights = make_view<const float>(r.weights.data(), t, k);
    const Status s = fused_experts(a, ctx);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::ClobberMemory();
    ++call;
  }
  double distinct = 0;
  for (const Routing& r : routings) distinct += double(r.distinct);
  distinct /= double(routings.size());
  const double bytes = distinct * l.expert_bytes;
  const double flops = 2.0 * double(t * k) *
                       (2.0 * double(model.inter) * double(h) + double(h) * double(model.inter));
  const double dot = quantised ? ceil.int8_gops : ceil.bf16_gflops;
  const double iters = double(state.iterations());
  using benchmark::Counter;
  state.counters["routed"] = distinct;
  state.counters["routed_MB"] = bytes / 1e6;
  state.counters["weight_GBs"] = Counter(bytes * iters / 1e9, Counter::kIsRate);
  state.counters["of_read_bw"] = Counter(bytes * iters / 1e9 / ceil.read_gbs, Counter::kIsRate);
  state.counters["GFLOPs"] = Counter(flops * iters / 1e9, Counter::kIsRate);
  state.counters["of_dot_ceiling"] = Counter(flops * iters / 1e9 / dot, Counter::kIsRate);
  state.counters["read_GBs"] = ceil.read_gbs;
  state.counters["dot_ceiling_G"] = dot;
}

void register_all() {
  for (const MoeModel& m : {kGptOss20B, kQwen3A3B}) {
    for (bool quantised : {false, true}) {
      const std::string name = std::string("BM_Moe/") + m.name + (quantised ? "/w4a4" : "/w4a16");
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Moe, m, quantised);
      b->ArgNames({"T", "threads"});
      for (int threads : {1, 2})
        for (int64_t t : {1, 16, 512}) b->Args({t, threads});
      b->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
}
const int kRegistered = (register_all(), 0);

}  // namespace
