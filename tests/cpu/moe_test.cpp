// The fused experts (quantkv/moe.hpp): every ISA path and thread count gives the scalar
// reference's bits (tests/reference/moe_reference.hpp) for NVFP4, MXFP4 and MXFP8, weight-only
// and quantised activations, both gate/up layouts, both activations, with and without biases,
// bf16 and fp32 outputs; routes to no expert, to every token's expert, the same expert twice in
// a row, ids outside the local range (expert_offset), k = 1 and 8, T = 0, decode on many experts
// (T = 1 and 16, k = 8, 24 experts), routes spanning several of the driver's batches, and calls
// split into token chunks by ctx.experts_budget_bytes. Outputs
// are poisoned before each run. With one expert, k = 1 and weight 1 the result is the linear
// layer's composition (quantkv::linear) bit for bit. A larger layer makes every parallel region use
// several threads.
#include "quantkv/moe.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quantkv/scale_layout.hpp"
#include "reference/moe_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

// Random stacked experts of a format: codes (finite) and modest row-major scales.
struct Experts {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t e = 0, h = 0, i = 0;
  std::vector<uint8_t> w13, s13, w2, s2;
  std::vector<float> w13_alpha, w2_alpha, x_global, h_global;
  std::vector<float> w3_alpha;  // empty: up takes w13_alpha
  ExpertsSource source() const {
    const int sfv = sf_vector_size(format);
    ExpertsSource s;
    s.w13 = make_view(w13.data(), e, 2 * i, row_bytes(format, h));
    s.w13_scale = make_view(s13.data(), e, 2 * i, h / sfv);
    s.w2 = make_view(w2.data(), e, h, row_bytes(format, i));
    s.w2_scale = make_view(s2.data(), e, h, i / sfv);
    s.format = format;
    s.w13_alpha = make_view(w13_alpha.data(), e);
    s.w2_alpha = make_view(w2_alpha.data(), e);
    s.x_global = make_view(x_global.data(), e);
    s.h_global = make_view(h_global.data(), e);
    if (!w3_alpha.empty()) s.w3_alpha = make_view(w3_alpha.data(), e);
    return s;
  }
};

void fill_codes(BlockFormat f, std::vector<uint8_t>& v, TestRng& rng) {
  for (auto& b : v) {
    b = uint8_t(rng.uniform_int(0, 255));
    if (f == BlockFormat::kMXFP8 && (b & 0x7F) == 0x7F) b ^= 1;  // no NaN
  }
}
void fill_scales(BlockFormat f, std::vector<uint8_t>& v, TestRng& rng) {
  // NVFP4: e4m3 0.125 .. 1.875; MX: e8m0 2^-3 .. 2^1.
  for (auto& b : v)
    b = uint8_t(f == BlockFormat::kNVFP4 ? rng.uniform_int(0x20, 0x3F) : rng.uniform_int(124, 128));
}

Experts make_experts(BlockFormat f, int64_t e, int64_t h, int64_t i, TestRng& rng) {
  Experts x;
  x.format = f;
  x.e = e;
  x.h = h;
  x.i = i;
  const int sfv = sf_vector_size(f);
  x.w13.resize(std::size_t(e * 2 * i * row_bytes(f, h)));
  x.s13.resize(std::size_t(e * 2 * i * (h / sfv)));
  x.w2.resize(std::size_t(e * h * row_bytes(f, i)));
  x.s2.resize(std::size_t(e * h * (i / sfv)));
  fill_codes(f, x.w13, rng);
  fill_codes(f, x.w2, rng);
  fill_scales(f, x.s13, rng);
  fill_scales(f, x.s2, rng);
  for (int64_t k = 0; k < e; ++k) {
    x.w13_alpha.push_back(rng.uniform_float(0.02f, 0.2f));
    x.w2_alpha.push_back(rng.uniform_float(0.02f, 0.2f));
    x.x_global.push_back(f == BlockFormat::kNVFP4 ? rng.uniform_float(100.0f, 1000.0f) : 1.0f);
    x.h_global.push_back(f == BlockFormat::kNVFP4 ? rng.uniform_float(50.0f, 1000.0f) : 1.0f);
  }
  return x;
}

// The experts packed by prepare_experts (a failure fails the test).
PreparedExperts prepared(const Experts& ex) {
  PreparedExperts p;
  const Status st = prepare_experts(ex.source(), &p, {});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return p;
}

std::vector<uint16_t> bf16_rows(int64_t n, TestRng& rng) {
  std::vector<uint16_t> v(static_cast<std::size_t>(n));
  for (auto& b : v) b = float_to_bf16(rng.normal(0.0f, 1.0f));
  return v;
}

struct Case {
  int64_t t = 9, k = 4, offset = 0;
  bool quantised = false, f32_out = false, bias = false;
  GateUpLayout layout = GateUpLayout::kHalves;
  MoeActivation act = MoeActivation::kSiluGated;
  std::vector<int32_t> ids;  // [T, k]; empty: random
  std::vector<int> threads = {1, 3};
  std::size_t budget = 0;  // ctx.experts_budget_bytes; 0: the default
};

void check_moe(const Experts& ex, const PreparedExperts& prepared, Case c, TestRng& rng) {
  const int64_t t = c.t, k = c.k, h = ex.h, i = ex.i, e = ex.e;
  SCOPED_TRACE(std::string(block_format_name(ex.format)) + " T = " + std::to_string(t) +
               ", k = " + std::to_string(k) + ", offset " + std::to_string(c.offset) +
               (c.quantised ? ", quantised" : ", weight-only") + (c.f32_out ? ", fp32" : ", bf16") +
               (c.bias ? ", bias" : "") +
               (c.layout == GateUpLayout::kInterleaved ? ", interleaved" : ", halves") +
               (c.act == MoeActivation::kSwigluOai ? ", swiglu-oai" : ", silu"));
  const std::vector<uint16_t> x = bf16_rows(t * h, rng);
  std::vector<int32_t> ids = c.ids;
  if (ids.empty()) {
    // Ids over [offset - 2, offset + E + 2): some outside the local range; local expert 1 never
    // chosen (when E > 2), every token's slot 0 on local expert 0, token 0 with a duplicate.
    ids.resize(std::size_t(t * k));
    for (auto& id : ids) {
      int64_t v = rng.uniform_int(c.offset - 2, c.offset + e + 1);
      if (e > 2 && v == c.offset + 1) v = c.offset + 2;
      id = int32_t(v);
    }
    for (int64_t r = 0; r < t; ++r) ids[std::size_t(r * k)] = int32_t(c.offset);
    if (t > 0 && k > 2) ids[2] = ids[1];
  }
  std::vector<float> weights(std::size_t(t * k));
  for (auto& w : weights) w = rng.uniform_float(0.0f, 1.0f);
  std::vector<float> b13(std::size_t(e * 2 * i)), b2(std::size_t(e * h));
  for (auto& v : b13) v = rng.normal(0.0f, 1.0f);
  for (auto& v : b2) v = rng.normal(0.0f, 0.5f);

  reference::MoeReferenceArgs r;
  r.format = ex.format;
  r.t = t;
  r.k = k;
  r.experts = e;
  r.hidden = h;
  r.inter = i;
  r.x = x.data();
  r.topk_ids = ids.data();
  r.topk_weights = weights.data();
  r.w13 = ex.w13.data();
  r.w13_scale = ex.s13.data();
  r.w2 = ex.w2.data();
  r.w2_scale = ex.s2.data();
  r.w13_alpha = ex.w13_alpha.data();
  r.w2_alpha = ex.w2_alpha.data();
  r.w3_alpha = ex.w3_alpha.empty() ? nullptr : ex.w3_alpha.data();
  r.x_global = ex.x_global.data();
  r.h_global = ex.h_global.data();
  r.expert_offset = c.offset;
  r.quantize_activations = c.quantised;
  r.gate_up = c.layout;
  r.activation = c.act;
  r.w13_bias = c.bias ? b13.data() : nullptr;
  r.w2_bias = c.bias ? b2.data() : nullptr;
  std::vector<uint16_t> ref16(std::size_t(t * h));
  std::vector<float> ref32(std::size_t(t * h));
  if (c.f32_out) {
    r.y_f32 = ref32.data();
  } else {
    r.y = ref16.data();
  }
  reference::moe_reference(r);
  if (c.ids.empty() && t > 0) {
    // Every token routes slot 0 to a local expert: the outputs are finite and mostly non-zero
    // (the comparison below is not one of zeros or NaNs).
    int64_t live = 0;
    for (int64_t n = 0; n < t * h; ++n) {
      const float v = c.f32_out ? ref32[n] : bf16_to_float(ref16[n]);
      ASSERT_TRUE(std::isfinite(v)) << "reference output " << n << " is " << v;
      live += v != 0.0f;
    }
    EXPECT_GT(live, t * h / 2);
  }

  testing::for_each_isa([&](IsaLevel) {
    for (int threads : c.threads) {
      SCOPED_TRACE("threads = " + std::to_string(threads));
      std::vector<uint16_t> y16(std::size_t(t * h));
      std::vector<float> y32(std::size_t(t * h));
      testing::poison(y16);
      testing::poison(y32);
      FusedExpertsArgs a;
      a.x = make_view(reinterpret_cast<const bfloat16*>(x.data()), t, h);
      a.topk_ids = make_view<const int32_t>(ids.data(), t, k);
      a.topk_weights = make_view<const float>(weights.data(), t, k);
      a.experts = &prepared;
      a.expert_offset = c.offset;
      a.quantize_activations = c.quantised;
      a.gate_up = c.layout;
      a.activation = c.act;
      if (c.bias) {
        a.w13_bias = make_view<const float>(b13.data(), e, 2 * i);
        a.w2_bias = make_view<const float>(b2.data(), e, h);
      }
      if (c.f32_out) {
        a.y_f32 = make_view(y32.data(), t, h);
      } else {
        a.y = make_view(reinterpret_cast<bfloat16*>(y16.data()), t, h);
      }
      Context ctx;
      ctx.num_threads = threads;
      if (c.budget != 0) ctx.experts_budget_bytes = c.budget;
      const Status st = fused_experts(a, ctx);
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (c.f32_out) {
        EXPECT_TRUE(y32.empty() ||
                    std::memcmp(y32.data(), ref32.data(), y32.size() * sizeof(float)) == 0)
            << "fp32 output differs from the reference";
      } else {
        EXPECT_TRUE(y16 == ref16) << "bf16 output differs from the reference";
      }
    }
  });
}

// Small shapes through every case of the op: both modes, both gate/up layouts, both activations,
// biases, fp32 and bf16 outputs, expert offsets, k = 1 and 8 (an unchosen expert, a duplicate in
// row 0), T = 0, 1, 7, 40 and 41 (above the register tile and the direct-decode limit: the panel
// path), ids all outside the local range; every ISA level at each of `threads`. Too small for a
// second thread to get work (threads_for_work): the threaded regions are MoeFormats' larger shapes.
void check_small_shapes(BlockFormat f, const std::vector<int>& threads) {
  SCOPED_TRACE(block_format_name(f));
  TestRng rng;
  const int sfv = sf_vector_size(f);
  // H = 64 (two 32-column pairs of w2; four NVFP4 blocks), I = 2 blocks (2I = 64 or 128).
  const Experts ex = make_experts(f, 5, 64, 2 * sfv, rng);
  PreparedExperts p;
  const Status st = prepare_experts(ex.source(), &p, {});
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(p.num_experts(), 5);
  ASSERT_EQ(p.hidden(), 64);
  ASSERT_EQ(p.intermediate(), 2 * sfv);
  int n = 0;
  for (bool quantised : {false, true}) {
    for (GateUpLayout layout : {GateUpLayout::kHalves, GateUpLayout::kInterleaved}) {
      for (MoeActivation act : {MoeActivation::kSiluGated, MoeActivation::kSwigluOai}) {
        Case c;
        c.threads = threads;
        c.quantised = quantised;
        c.layout = layout;
        c.act = act;
        c.bias = (n % 2) == 1;
        c.f32_out = (n % 3) == 0;
        c.offset = (n % 4) * 3;  // 0, 3, 6, 9
        check_moe(ex, p, c, rng);
        ++n;
      }
    }
  }
  // k = 1 and 8, T = 0, T = 1, many tokens on one expert (above the register tiles; the panel
  // path quantised and weight-only).
  for (int64_t k : {1, 8}) {
    Case c;
    c.threads = threads;
    c.k = k;
    c.t = 7;
    c.quantised = k == 8;
    c.bias = true;
    check_moe(ex, p, c, rng);
  }
  for (int64_t t : {0, 1, 40, 41}) {
    Case c;
    c.threads = threads;
    c.t = t;
    c.k = 2;
    c.quantised = t == 40;
    c.bias = t == 41;
    c.f32_out = t == 1;
    c.act = MoeActivation::kSwigluOai;
    c.layout = GateUpLayout::kInterleaved;
    check_moe(ex, p, c, rng);
  }
  // Every id outside the local range: y is 0.
  Case out;
  out.threads = threads;
  out.t = 3;
  out.k = 2;
  out.offset = 100;
  out.ids = {0, 1, 2, 99, 105, -1};
  check_moe(ex, p, out, rng);
}

class MoeFormats : public ::testing::TestWithParam<BlockFormat> {};

TEST_P(MoeFormats, EveryIsaAndThreadCountGivesTheReferenceBits) {
  check_small_shapes(GetParam(), {1, 3});
}

// The same small shapes at 1 and 2 threads: the MoE cases of the aarch64 subset under qemu-user
// (CMakePresets.json, aarch64-cross), where MoeFormats' threaded shapes take tens of minutes.
TEST(MoeSmall, Nvfp4GivesTheReferenceBitsOnEveryIsa) {
  check_small_shapes(BlockFormat::kNVFP4, {1, 2});
}
TEST(MoeSmall, Mxfp4GivesTheReferenceBitsOnEveryIsa) {
  check_small_shapes(BlockFormat::kMXFP4, {1, 2});
}
TEST(MoeSmall, Mxfp8GivesTheReferenceBitsOnEveryIsa) {
  check_small_shapes(BlockFormat::kMXFP8, {1, 2});
}

// Gate and up quantised with different global scales (NVFP4 checkpoints may store one per
// projection): up's columns take w3_alpha, gate's w13_alpha, in both layouts and modes, on every
// ISA path. Without w3_alpha the same call gives other bits (the factor is used).
TEST(MoeSmall, UpWithItsOwnFactorGivesTheReferenceBits) {
  TestRng rng;
  Experts ex = make_experts(BlockFormat::kNVFP4, 3, 64, 32, rng);
  for (int64_t e = 0; e < ex.e; ++e) ex.w3_alpha.push_back(rng.uniform_float(0.02f, 0.2f));
  ex.w3_alpha[1] = ex.w13_alpha[1];  // one expert with equal factors
  const PreparedExperts p = prepared(ex);
  ASSERT_EQ(p.w3_alpha, ex.w3_alpha);
  for (bool quantised : {false, true}) {
    for (GateUpLayout layout : {GateUpLayout::kHalves, GateUpLayout::kInterleaved}) {
      Case c;
      c.t = 7;
      c.k = 3;
      c.quantised = quantised;
      c.bias = quantised;
      c.layout = layout;
      c.threads = {1, 2};
      check_moe(ex, p, c, rng);
    }
  }
  // The same call with up on gate's factor: different outputs.
  PreparedExperts same = p;
  same.w3_alpha.clear();
  const std::vector<uint16_t> x = bf16_rows(2 * ex.h, rng);
  const std::vector<int32_t> ids = {0, 2, 2, 0};
  const std::vector<float> weights = {0.5f, 0.25f, 1.0f, 0.75f};
  std::vector<float> y1(std::size_t(2 * ex.h)), y2(y1.size());
  FusedExpertsArgs a;
  a.x = make_view(reinterpret_cast<const bfloat16*>(x.data()), 2, ex.h);
  a.topk_ids = make_view<const int32_t>(ids.data(), 2, 2);
  a.topk_weights = make_view<const float>(weights.data(), 2, 2);
  a.experts = &p;
  a.y_f32 = make_view(y1.data(), 2, ex.h);
  ASSERT_TRUE(fused_experts(a, {}).ok());
  a.experts = &same;
  a.y_f32 = make_view(y2.data(), 2, ex.h);
  ASSERT_TRUE(fused_experts(a, {}).ok());
  EXPECT_NE(y1, y2);
  // A w3_alpha of the wrong length or not finite is refused, naming it.
  same.w3_alpha = {1.0f};
  Status st = fused_experts(a, {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("w3_alpha"), std::string::npos) << st.to_string();
  same.w3_alpha = {1.0f, NAN, 1.0f};
  st = fused_experts(a, {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expert 1"), std::string::npos) << st.to_string();
}

// Large enough that every parallel region (the GEMMs, the activation, the combine) runs on more
// than one thread at threads = 3.
TEST_P(MoeFormats, ThreadedShapesGiveTheReferenceBits) {
  const BlockFormat f = GetParam();
  TestRng rng;
  const Experts ex = make_experts(f, 3, 256, 128, rng);
  const PreparedExperts p = prepared(ex);
  for (bool quantised : {false, true}) {
    Case c;
    c.t = 96;
    c.k = 4;
    c.quantised = quantised;
    c.bias = true;
    c.f32_out = quantised;
    c.layout = quantised ? GateUpLayout::kInterleaved : GateUpLayout::kHalves;
    c.act = quantised ? MoeActivation::kSwigluOai : MoeActivation::kSiluGated;
    check_moe(ex, p, c, rng);
  }
}

// Decode on many experts: every routed expert's GEMM runs in one parallel region (the batches of
// src/cpu/moe_driver.cpp), with enough work for several threads; T = 33, k = 8 (264 routes)
// spans more than one batch. 1, 2 and 3 threads give the reference's bits.
TEST_P(MoeFormats, DecodeOnManyExpertsGivesTheReferenceBits) {
  const BlockFormat f = GetParam();
  TestRng rng;
  const Experts ex = make_experts(f, 24, 512, 256, rng);
  const PreparedExperts p = prepared(ex);
  int n = 0;
  for (int64_t t : {1, 16, 33}) {
    for (bool quantised : {false, true}) {
      Case c;
      c.t = t;
      c.k = 8;
      c.quantised = quantised;
      c.bias = (n % 2) == 0;
      c.f32_out = (n % 3) == 0;
      c.layout = quantised ? GateUpLayout::kInterleaved : GateUpLayout::kHalves;
      c.act = quantised ? MoeActivation::kSwigluOai : MoeActivation::kSiluGated;
      c.threads = {1, 2, 3};
      check_moe(ex, p, c, rng);
      ++n;
    }
  }
}

// Calls whose routes exceed ctx.experts_budget_bytes run in token chunks: the bits are those of
// one pass. Budgets of 1 byte (one token per chunk), 3 tokens (41 = 13 chunks of 3 and one of 2)
// and 40 tokens (a chunk of 40 and one of 1), bf16 and fp32 outputs, both modes, 1 and 3 threads.
TEST_P(MoeFormats, TokenChunksGiveTheReferenceBits) {
  const BlockFormat f = GetParam();
  TestRng rng;
  const Experts ex = make_experts(f, 6, 64, 2 * sf_vector_size(f), rng);
  const PreparedExperts p = prepared(ex);
  int n = 0;
  for (int64_t tokens : {1, 3, 40}) {
    for (bool quantised : {false, true}) {
      Case c;
      c.t = 41;
      c.k = 3;
      c.budget = tokens == 1 ? 1 : std::size_t(tokens * c.k * ex.h) * sizeof(float);
      c.quantised = quantised;
      c.bias = (n % 2) == 0;
      c.f32_out = (n % 3) == 0;
      c.layout = quantised ? GateUpLayout::kInterleaved : GateUpLayout::kHalves;
      c.act = quantised ? MoeActivation::kSwigluOai : MoeActivation::kSiluGated;
      check_moe(ex, p, c, rng);
      ++n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MoeFormats,
                         ::testing::Values(BlockFormat::kNVFP4, BlockFormat::kMXFP4,
                                           BlockFormat::kMXFP8),
                         [](const auto& info) {
                           return std::string(block_format_name(info.param));
                         });

// Tokens without a local route get 0, whatever the poison.
TEST(FusedExperts, TokensWithoutARouteAreZero) {
  TestRng rng;
  const Experts ex = make_experts(BlockFormat::kNVFP4, 2, 32, 16, rng);
  PreparedExperts p;
  ASSERT_TRUE(prepare_experts(ex.source(), &p, {}).ok());
  const std::vector<uint16_t> x = bf16_rows(2 * 32, rng);
  const std::vector<int32_t> ids = {7, -1, 0, 1};
  const std::vector<float> w = {1.0f, 1.0f, 0.5f, 0.5f};
  std::vector<float> y(2 * 32);
  testing::poison(y);
  FusedExpertsArgs a;
  a.x = make_view(reinterpret_cast<const bfloat16*>(x.data()), 2, 32);
  a.topk_ids = make_view<const int32_t>(ids.data(), 2, 2);
  a.topk_weights = make_view<const float>(w.data(), 2, 2);
  a.experts = &p;
  a.y_f32 = make_view(y.data(), 2, 32);
  const Status st = fused_experts(a, {});
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int c = 0; c < 32; ++c) EXPECT_EQ(y[c], 0.0f) << c;
}

// One expert, k = 1, weight 1: the result is linear(w2, act(linear(w13, x))) bit for bit (the
// combine adds 1 * o to 0), weight-only and quantised.
TEST(FusedExperts, OneExpertIsTheLinearLayersComposition) {
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (bool quantised : {false, true}) {
      SCOPED_TRACE(std::string(block_format_name(f)) + (quantised ? " quantised" : ""));
      const int64_t t = 11, h = 96, i = 64;
      const Experts ex = make_experts(f, 1, h, i, rng);
      PreparedExperts p;
      ASSERT_TRUE(prepare_experts(ex.source(), &p, {}).ok());
      const std::vector<uint16_t> x = bf16_rows(t * h, rng);
      const std::vector<int32_t> ids(std::size_t(t), 0);
      const std::vector<float> w(std::size_t(t), 1.0f);
      const auto xv = make_view(reinterpret_cast<const bfloat16*>(x.data()), t, h);

      // The composition by hand.
      const int sfv = sf_vector_size(f);
      std::vector<float> gu(std::size_t(t * 2 * i)), want(std::size_t(t * h));
      std::vector<uint8_t> xq(std::size_t(t * row_bytes(f, h)));
      const auto xs_shape = swizzled_scale_shape(t, h / sfv);
      std::vector<uint8_t> xs(std::size_t(xs_shape[0] * xs_shape[1] * 512));
      LinearArgs l1;
      if (quantised) {
        ASSERT_TRUE(quantize_dynamic_block_scaled(xv, ex.x_global[0], f,
                                                  make_view(xq.data(), t, row_bytes(f, h)),
                                                  make_view(xs.data(), xs_shape), {})
                        .ok());
        l1.x = make_view<const uint8_t>(xq.data(), t, row_bytes(f, h));
        l1.x_scale = make_view<const uint8_t>(xs.data(), xs_shape);
        l1.alpha = ex.w13_alpha[0] / ex.x_global[0];
      } else {
        l1.x_bf16 = xv;
        l1.alpha = ex.w13_alpha[0];
      }
      l1.weight = &p.w13[0];
      l1.y_f32 = make_view(gu.data(), t, 2 * i);
      ASSERT_TRUE(linear(l1, {}).ok());
      std::vector<float> h32(std::size_t(t * i));
      std::vector<uint16_t> h16(std::size_t(t * i));
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t c = 0; c < i; ++c) {
          h32[r * i + c] = moe_activation(MoeActivation::kSiluGated, gu[r * 2 * i + c],
                                          gu[r * 2 * i + i + c], 1.702f, 7.0f);
          h16[r * i + c] = float_to_bf16(h32[r * i + c]);
        }
      }
      std::vector<uint8_t> hq(std::size_t(t * row_bytes(f, i)));
      const auto hs_shape = swizzled_scale_shape(t, i / sfv);
      std::vector<uint8_t> hs(std::size_t(hs_shape[0] * hs_shape[1] * 512));
      LinearArgs l2;
      if (quantised) {
        ASSERT_TRUE(quantize_dynamic_block_scaled(make_view<const float>(h32.data(), t, i),
                                                  ex.h_global[0], f,
                                                  make_view(hq.data(), t, row_bytes(f, i)),
                                                  make_view(hs.data(), hs_shape), {})
                        .ok());
        l2.x = make_view<const uint8_t>(hq.data(), t, row_bytes(f, i));
        l2.x_scale = make_view<const uint8_t>(hs.data(), hs_shape);
        l2.alpha = ex.w2_alpha[0] / ex.h_global[0];
      } else {
        l2.x_bf16 = make_view(reinterpret_cast<const bfloat16*>(h16.data()), t, i);
        l2.alpha = ex.w2_alpha[0];
      }
      l2.weight = &p.w2[0];
      l2.y_f32 = make_view(want.data(), t, h);
      ASSERT_TRUE(linear(l2, {}).ok());

      std::vector<float> y(std::size_t(t * h));
      testing::poison(y);
      FusedExpertsArgs a;
      a.x = xv;
      a.topk_ids = make_view<const int32_t>(ids.data(), t, 1);
      a.topk_weights = make_view<const float>(w.data(), t, 1);
      a.experts = &p;
      a.quantize_activations = quantised;
      a.y_f32 = make_view(y.data(), t, h);
      const Status st = fused_experts(a, {});
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace quantkv
