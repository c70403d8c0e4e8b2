// The two MoE layers the experts' benchmarks run (bench/moe_bench.cpp, and the side-by-side
// bench/ggml_moe_bench.cpp, which must draw the very same weights, routings and input):
//     gpt_oss_20b    H 2880, I 2880, E 32, top-4, MXFP4, interleaved gate/up, SwiGLU-OAI, biases
//     qwen3_30b_a3b  H 2048, I 768, E 128, top-8, NVFP4, halves, SiLU
// The weights are random codes and block scales from a fixed seed, as a checkpoint stores them
// (e2m1 codes with the even element in the low nibble, row-major scales: quantkv's
// ExpertsSource); the routings are random top-k from a fixed seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "quantkv/moe.hpp"

namespace moe_layers {

struct MoeModel {
  const char* name;
  int64_t hidden, inter, experts, top_k;
  quantkv::BlockFormat format;
  bool gpt_oss;  // interleaved gate/up, SwiGLU-OAI and biases; else halves, SiLU, no biases
};
inline constexpr MoeModel kGptOss20B{"gpt_oss_20b", 2880, 2880, 32, 4, quantkv::BlockFormat::kMXFP4,
                                     true};
inline constexpr MoeModel kQwen3A3B{
    "qwen3_30b_a3b", 2048, 768, 128, 8, quantkv::BlockFormat::kNVFP4, false};

// One layer's experts as a checkpoint holds them, with the per-expert factors quantkv takes.
struct RawExperts {
  std::vector<uint8_t> w13, s13;  // [E, 2I, row_bytes(H)], [E, 2I, H / SFV]
  std::vector<uint8_t> w2, s2;    // [E, H, row_bytes(I)], [E, H, I / SFV]
  std::vector<float> b13, b2;     // [E, 2I], [E, H] (drawn for both layers, used by gpt-oss)
  std::vector<float> x_global, h_global, alpha;  // [E] each (NVFP4: 400, 20, 0.01; MX: 1)
  double expert_bytes = 0;                       // codes + block scales of one expert's w13 and w2

  quantkv::ExpertsSource source(const MoeModel& m) const {
    using quantkv::make_view;
    const quantkv::BlockFormat f = m.format;
    const int64_t e = m.experts, h = m.hidden, i = m.inter, sfv = quantkv::sf_vector_size(f);
    quantkv::ExpertsSource s;
    s.w13 = make_view<const uint8_t>(w13.data(), e, 2 * i, quantkv::row_bytes(f, h));
    s.w13_scale = make_view<const uint8_t>(s13.data(), e, 2 * i, h / sfv);
    s.w2 = make_view<const uint8_t>(w2.data(), e, h, quantkv::row_bytes(f, i));
    s.w2_scale = make_view<const uint8_t>(s2.data(), e, h, i / sfv);
    s.format = f;
    s.w13_alpha = make_view<const float>(alpha.data(), e);
    s.w2_alpha = make_view<const float>(alpha.data(), e);
    s.x_global = make_view<const float>(x_global.data(), e);
    s.h_global = make_view<const float>(h_global.data(), e);
    return s;
  }
};

inline void fill_random(std::vector<uint8_t>& v, std::mt19937_64& rng) {
  for (std::size_t i = 0; i < v.size(); i += 8) {
    const uint64_t r = rng();
    for (std::size_t j = 0; j < 8 && i + j < v.size(); ++j) v[i + j] = uint8_t(r >> (8 * j));
  }
}

// Sane block scales: e4m3 0x28-0x4F (2^-2 to about 2^2.9) for NVFP4, e8m0 2^-7 to 2^4 for MX.
inline void fill_scales(quantkv::BlockFormat f, std::vector<uint8_t>& v, std::mt19937_64& rng) {
  for (auto& b : v)
    b = f == quantkv::BlockFormat::kNVFP4 ? uint8_t(0x28 + rng() % 40) : uint8_t(120 + rng() % 12);
}

// Random codes and scales (seed 42), then the biases from the same generator.
inline RawExperts make_raw_experts(const MoeModel& m) {
  const quantkv::BlockFormat f = m.format;
  const int64_t e = m.experts, h = m.hidden, i = m.inter, sfv = quantkv::sf_vector_size(f);
  std::mt19937_64 rng(42);
  RawExperts r;
  r.w13.resize(std::size_t(e * 2 * i * quantkv::row_bytes(f, h)));
  r.s13.resize(std::size_t(e * 2 * i * (h / sfv)));
  r.w2.resize(std::size_t(e * h * quantkv::row_bytes(f, i)));
  r.s2.resize(std::size_t(e * h * (i / sfv)));
  fill_random(r.w13, rng);
  fill_random(r.w2, rng);
  fill_scales(f, r.s13, rng);
  fill_scales(f, r.s2, rng);
  r.expert_bytes = double(r.w13.size() + r.s13.size() + r.w2.size() + r.s2.size()) / double(e);
  const bool nv = f == quantkv::BlockFormat::kNVFP4;
  // The W4A4 quantiser's global multipliers, 448 * 6 / amax by convention (contract section 5):
  // x is N(0, 1) (amax about 5 over these T x H); h, after the activation, reaches about 130 on
  // these weights: at h_global = 40 the w4a4 output already moves away from w4a16's (max-abs
  // ratio 0.20 against 0.16 at 2-20), at 200 the block scales saturate (0.6-0.7).
  r.x_global.assign(std::size_t(e), nv ? 400.0f : 1.0f);
  r.h_global.assign(std::size_t(e), nv ? 20.0f : 1.0f);
  r.alpha.assign(std::size_t(e), nv ? 0.01f : 1.0f);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  r.b13.resize(std::size_t(e * 2 * i));
  r.b2.resize(std::size_t(e * h));
  for (auto& b : r.b13) b = normal(rng);
  for (auto& b : r.b2) b = normal(rng);
  return r;
}

// Random routings of T tokens (seed 1234): k distinct experts per token (as a router's top-k),
// weights that sum to 1.
inline constexpr int kRoutings = 16;
struct Routing {
  std::vector<int32_t> ids;    // [T, k]
  std::vector<float> weights;  // [T, k]
  int64_t distinct = 0;
};

inline std::vector<Routing> make_routings(const MoeModel& m, int64_t t) {
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

// The layer's input: T x H standard normal values rounded to bf16 (seed 7).
inline std::vector<quantkv::bfloat16> make_input(int64_t t, int64_t h) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<quantkv::bfloat16> x(std::size_t(t * h));
  for (auto& v : x) v.bits = quantkv::float_to_bf16(normal(rng));
  return x;
}

// The fused_experts arguments of both benchmarks for T tokens: x and y bf16 [T, H], the layer's
// layout, activation and (gpt-oss) biases (b13 [E, 2I], b2 [E, H]); `experts` and the routing
// are the caller's, per call (route).
inline quantkv::FusedExpertsArgs fused_args(const MoeModel& m, int64_t t, bool quantised,
                                            const quantkv::bfloat16* x, quantkv::bfloat16* y,
                                            const float* b13, const float* b2) {
  using quantkv::make_view;
  quantkv::FusedExpertsArgs a;
  a.x = make_view<const quantkv::bfloat16>(x, t, m.hidden);
  a.quantize_activations = quantised;
  if (m.gpt_oss) {
    a.gate_up = quantkv::GateUpLayout::kInterleaved;
    a.activation = quantkv::MoeActivation::kSwigluOai;
    a.w13_bias = make_view<const float>(b13, m.experts, 2 * m.inter);
    a.w2_bias = make_view<const float>(b2, m.experts, m.hidden);
  }
  a.y = make_view(y, t, m.hidden);
  return a;
}

inline void route(quantkv::FusedExpertsArgs& a, const Routing& r, int64_t t, int64_t k) {
  a.topk_ids = quantkv::make_view<const int32_t>(r.ids.data(), t, k);
  a.topk_weights = quantkv::make_view<const float>(r.weights.data(), t, k);
}

}  // namespace moe_layers
