// The MoE experts loaders (load_experts, list_quantized_experts): small checkpoints written by
// the independent writer (tests/safetensors_writer.hpp) from random codes, in gpt-oss's stacked
// MXFP4 layout (Hugging Face and gpt-oss's own names) and per expert (NVFP4 compressed-tensors
// and ModelOpt, MXFP4 compressed-tensors, Mixtral's w1/w3/w2 names), loaded and run through
// fused_experts against the scalar reference (tests/reference/moe_reference.hpp) fed with the raw
// tensors, the factors computed here from the stored global scales: bit for bit, weight-only and
// quantised, bf16 and fp32 outputs, on every ISA. Missing and malformed tensors are named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quantkv/checkpoint.hpp"
#include "reference/moe_reference.hpp"
#include "safetensors_writer.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::StEntry;
using testing::TempFile;
using testing::TestRng;
using testing::write_safetensors;

std::vector<uint8_t> random_bytes(std::size_t n, int lo, int hi, TestRng& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng.uniform_int(lo, hi));
  return v;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The raw experts as the reference takes them (stacked, row-major) plus what the checkpoint
// stores besides.
struct RawExperts {
  BlockFormat format = BlockFormat::kMXFP4;
  int64_t e = 0, h = 0, i = 0;
  std::vector<uint8_t> w13, s13, w2, s2;
  std::vector<float> w13_alpha, w2_alpha, x_global, h_global, b13, b2;
  std::vector<float> w3_alpha;  // up's own factor, or empty (w13_alpha's)
  GateUpLayout layout = GateUpLayout::kHalves;
  MoeActivation act = MoeActivation::kSiluGated;
};

// Runs the loaded experts and the reference on the raw ones; every ISA and two thread counts
// give the reference's bits.
void check_against_reference(const LoadedExperts& loaded, const RawExperts& raw, bool quantised,
                             bool f32_out, TestRng& rng) {
  SCOPED_TRACE(std::string(quantised ? "quantised" : "weight-only") +
               (f32_out ? ", fp32" : ", bf16"));
  const int64_t t = 7, k = 2, h = raw.h;
  std::vector<uint16_t> x(std::size_t(t * h));
  for (auto& b : x) b = float_to_bf16(rng.normal(0.0f, 1.0f));
  std::vector<int32_t> ids(std::size_t(t * k));
  for (auto& id : ids) id = int32_t(rng.uniform_int(0, raw.e - 1));
  std::vector<float> weights(std::size_t(t * k));
  for (auto& w : weights) w = rng.uniform_float(0.1f, 1.0f);

  reference::MoeReferenceArgs r;
  r.format = raw.format;
  r.t = t;
  r.k = k;
  r.experts = raw.e;
  r.hidden = h;
  r.inter = raw.i;
  r.x = x.data();
  r.topk_ids = ids.data();
  r.topk_weights = weights.data();
  r.w13 = raw.w13.data();
  r.w13_scale = raw.s13.data();
  r.w2 = raw.w2.data();
  r.w2_scale = raw.s2.data();
  r.w13_alpha = raw.w13_alpha.data();
  r.w2_alpha = raw.w2_alpha.data();
  r.w3_alpha = raw.w3_alpha.empty() ? nullptr : raw.w3_alpha.data();
  r.x_global = raw.x_global.data();
  r.h_global = raw.h_global.data();
  r.quantize_activations = quantised;
  r.gate_up = raw.layout;
  r.activation = raw.act;
  r.w13_bias = raw.b13.empty() ? nullptr : raw.b13.data();
  r.w2_bias = raw.b2.empty() ? nullptr : raw.b2.data();
  std::vector<uint16_t> ref16(std::size_t(t * h));
  std::vector<float> ref32(std::size_t(t * h));
  if (f32_out) {
    r.y_f32 = ref32.data();
  } else {
    r.y = ref16.data();
  }
  reference::moe_reference(r);
  int64_t live = 0;
  for (int64_t n = 0; n < t * h; ++n) {
    const float v = f32_out ? ref32[std::size_t(n)] : bf16_to_float(ref16[std::size_t(n)]);
    ASSERT_TRUE(std::isfinite(v)) << "reference output " << n;
    live += v != 0.0f;
  }
  EXPECT_GT(live, t * h / 2);

  testing::for_each_isa([&](IsaLevel) {
    for (int threads : {1, 3}) {
      std::vector<uint16_t> y16(std::size_t(t * h));
      std::vector<float> y32(std::size_t(t * h));
      testing::poison(y16);
      testing::poison(y32);
      FusedExpertsArgs a;
      loaded.apply_to(&a);
      a.x = make_view(reinterpret_cast<const bfloat16*>(x.data()), t, h);
      a.topk_ids = make_view<const int32_t>(ids.data(), t, k);
      a.topk_weights = make_view<const float>(weights.data(), t, k);
      a.quantize_activations = quantised;
      if (f32_out) {
        a.y_f32 = make_view(y32.data(), t, h);
      } else {
        a.y = make_view(reinterpret_cast<bfloat16*>(y16.data()), t, h);
      }
      Context ctx;
      ctx.num_threads = threads;
      const Status st = fused_experts(a, ctx);
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (f32_out) {
        EXPECT_EQ(0, std::memcmp(y32.data(), ref32.data(), y32.size() * 4)) << threads;
      } else {
        EXPECT_EQ(y16, ref16) << threads;
      }
    }
  });
}

Status load_file(const std::vector<StEntry>& entries, const std::string& prefix, LoadedExperts* out,
                 ExpertsCheckpointLayout layout = ExpertsCheckpointLayout::kAuto) {
  TempFile file(write_safetensors(entries));
  SafetensorsCheckpoint ckpt;
  QUANTKV_RETURN_IF_ERROR(SafetensorsCheckpoint::open(file.path(), &ckpt));
  return load_experts(ckpt, prefix, out, Context{}, layout);
}

// ------------------------------------------------------------------ gpt-oss

// Random gpt-oss experts: MXFP4 codes, e8m0 scales 2^-3 .. 2^1, BF16 gate_up bias and F32
// down bias (both dtypes the loader reads).
RawExperts gpt_oss_raw(int64_t e, int64_t h, int64_t i, TestRng& rng) {
  RawExperts r;
  r.e = e;
  r.h = h;
  r.i = i;
  r.w13 = random_bytes(std::size_t(e * 2 * i * h / 2), 0, 255, rng);
  r.s13 = random_bytes(std::size_t(e * 2 * i * h / 32), 124, 128, rng);
  r.w2 = random_bytes(std::size_t(e * h * i / 2), 0, 255, rng);
  r.s2 = random_bytes(std::size_t(e * h * i / 32), 124, 128, rng);
  r.w13_alpha.assign(std::size_t(e), 1.0f);
  r.w2_alpha = r.x_global = r.h_global = r.w13_alpha;
  for (int64_t n = 0; n < e * 2 * i; ++n) {
    r.b13.push_back(bf16_to_float(float_to_bf16(rng.normal(0.0f, 1.0f))));
  }
  for (int64_t n = 0; n < e * h; ++n) r.b2.push_back(rng.normal(0.0f, 0.5f));
  r.layout = GateUpLayout::kInterleaved;
  r.act = MoeActivation::kSwigluOai;
  return r;
}

std::vector<StEntry> gpt_oss_entries(const RawExperts& r, const std::string& p, bool hf) {
  std::vector<uint8_t> b13;
  for (const float v : r.b13) {
    const uint16_t bits = float_to_bf16(v);
    b13.push_back(uint8_t(bits & 0xFF));
    b13.push_back(uint8_t(bits >> 8));
  }
  const std::string w1 = hf ? p + ".gate_up_proj_blocks" : p + ".mlp1_weight.blocks";
  const std::string s1 = hf ? p + ".gate_up_proj_scales" : p + ".mlp1_weight.scales";
  const std::string c1 = hf ? p + ".gate_up_proj_bias" : p + ".mlp1_bias";
  const std::string w2 = hf ? p + ".down_proj_blocks" : p + ".mlp2_weight.blocks";
  const std::string s2 = hf ? p + ".down_proj_scales" : p + ".mlp2_weight.scales";
  const std::string c2 = hf ? p + ".down_proj_bias" : p + ".mlp2_bias";
  return {{w1, "U8", {r.e, 2 * r.i, r.h / 32, 16}, r.w13},
          {s1, "U8", {r.e, 2 * r.i, r.h / 32}, r.s13},
          {c1, "BF16", {r.e, 2 * r.i}, b13},
          {w2, "U8", {r.e, r.h, r.i / 32, 16}, r.w2},
          {s2, "U8", {r.e, r.h, r.i / 32}, r.s2},
          {c2, "F32", {r.e, r.h}, f32_bytes(r.b2)},
          // A dense tensor beside them (the router), which the loader ignores.
          {p + ".router_weight_unused", "F32", {1}, f32_bytes({1.0f})}};
}

class GptOssExperts : public ::testing::TestWithParam<bool> {};

TEST_P(GptOssExperts, LoadsInPlaceAndMatchesTheReference) {
  const bool hf = GetParam();
  TestRng rng;
  // H = 96 (three blocks), I = 32 and 64: at and above one MXFP4 block.
  for (const int64_t inter : {32, 64}) {
    SCOPED_TRACE("I = " + std::to_string(inter));
    const RawExperts raw = gpt_oss_raw(3, 96, inter, rng);
    const std::string p = hf ? "model.layers.0.mlp.experts" : "block.0.mlp";
    LoadedExperts loaded;
    const Status st = load_file(gpt_oss_entries(raw, p, hf), p, &loaded);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(loaded.format, CheckpointFormat::kMXFP4);
    EXPECT_EQ(loaded.layout, ExpertsCheckpointLayout::kGptOss);
    EXPECT_EQ(loaded.gate_up, GateUpLayout::kInterleaved);
    EXPECT_EQ(loaded.activation, MoeActivation::kSwigluOai);
    EXPECT_EQ(loaded.experts.num_experts(), 3);
    EXPECT_EQ(loaded.experts.hidden(), 96);
    EXPECT_EQ(loaded.experts.intermediate(), inter);
    EXPECT_EQ(loaded.w13_bias, raw.b13);
    EXPECT_EQ(loaded.w2_bias, raw.b2);
    for (const bool q : {false, true}) check_against_reference(loaded, raw, q, q, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Names, GptOssExperts, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "HuggingFace" : "GptOssOwn"; });

// ------------------------------------------------------------------ per expert

enum class PerExpertKind { kNvfp4CompressedTensors, kNvfp4ModelOpt, kMxfp4CompressedTensors };

struct PerExpertCase {
  PerExpertKind kind;
  bool mixtral_names;
  bool bias;
};

// One projection's entries of `kind` with `codes` / `scales` and the given globals (the
// quantiser's multipliers g_w and g_a; ModelOpt stores their inverses).
void add_projection(std::vector<StEntry>* out, PerExpertKind kind, const std::string& p, int64_t n,
                    int64_t k, const uint8_t* codes, const uint8_t* scales, float g_w, float g_a) {
  const bool nv = kind != PerExpertKind::kMxfp4CompressedTensors;
  const int64_t sfv = nv ? 16 : 32;
  std::vector<uint8_t> c(codes, codes + n * k / 2), s(scales, scales + n * k / sfv);
  switch (kind) {
    case PerExpertKind::kNvfp4CompressedTensors:
      out->push_back({p + ".weight_packed", "U8", {n, k / 2}, c});
      out->push_back({p + ".weight_scale", "F8_E4M3", {n, k / 16}, s});
      out->push_back({p + ".weight_global_scale", "F32", {1}, f32_bytes({g_w})});
      out->push_back({p + ".input_global_scale", "F32", {1}, f32_bytes({g_a})});
      break;
    case PerExpertKind::kNvfp4ModelOpt:
      out->push_back({p + ".weight", "U8", {n, k / 2}, c});
      out->push_back({p + ".weight_scale", "F8_E4M3", {n, k / 16}, s});
      out->push_back({p + ".weight_scale_2", "F32", {}, f32_bytes({1.0f / g_w})});
      out->push_back({p + ".input_scale", "F32", {}, f32_bytes({1.0f / g_a})});
      break;
    case PerExpertKind::kMxfp4CompressedTensors:
      out->push_back({p + ".weight_packed", "U8", {n, k / 2}, c});
      out->push_back({p + ".weight_scale", "U8", {n, k / 32}, s});
      break;
  }
}

struct PerExpertCheckpoint {
  RawExperts raw;
  std::vector<StEntry> entries;
};

PerExpertCheckpoint per_expert_checkpoint(const PerExpertCase& c, const std::string& p, int64_t e,
                                          int64_t h, int64_t i, TestRng& rng) {
  const bool nv = c.kind != PerExpertKind::kMxfp4CompressedTensors;
  const int64_t sfv = nv ? 16 : 32;
  PerExpertCheckpoint out;
  RawExperts& r = out.raw;
  r.format = nv ? BlockFormat::kNVFP4 : BlockFormat::kMXFP4;
  r.e = e;
  r.h = h;
  r.i = i;
  r.w13 = random_bytes(std::size_t(e * 2 * i * h / 2), 0, 255, rng);
  r.w2 = random_bytes(std::size_t(e * h * i / 2), 0, 255, rng);
  // NVFP4: e4m3 0.125 .. 1.875; MXFP4: e8m0 2^-3 .. 2^1.
  const int lo = nv ? 0x20 : 124, hi = nv ? 0x3F : 128;
  r.s13 = random_bytes(std::size_t(e * 2 * i * h / sfv), lo, hi, rng);
  r.s2 = random_bytes(std::size_t(e * h * i / sfv), lo, hi, rng);
  const std::string gate = c.mixtral_names ? "w1" : "gate_proj";
  const std::string up = c.mixtral_names ? "w3" : "up_proj";
  const std::string down = c.mixtral_names ? "w2" : "down_proj";
  for (int64_t x = 0; x < e; ++x) {
    // gate and up have their own g_w (up's columns take w3_alpha) and g_a (x_global is the
    // smaller); expert 0's gate and up share g_w, as llm-compressor writes them.
    const float g13 = nv ? rng.uniform_float(2000.0f, 6000.0f) : 1.0f;
    const float g3 = nv && x > 0 ? rng.uniform_float(2000.0f, 6000.0f) : g13;
    const float g2 = nv ? rng.uniform_float(2000.0f, 6000.0f) : 1.0f;
    const float ga_gate = nv ? rng.uniform_float(100.0f, 1000.0f) : 1.0f;
    const float ga_up = nv ? rng.uniform_float(100.0f, 1000.0f) : 1.0f;
    // h = act(gate, up) is ~1e-5..1e-2 here (the weights' factors are 1 / g); a calibration would
    // give its global scale as 448 * 6 / amax (~1e6). 2e4..2e5 keeps its block scales normal e4m3
    // values; with 50..1000 most blocks' scales rounded to zero and the reference's output of
    // whole tokens was zero (seed 11400630351337446917).
    const float ga_down = nv ? rng.uniform_float(2e4f, 2e5f) : 1.0f;
    const std::string base = p + "." + std::to_string(x) + ".";
    const uint8_t* w13 = r.w13.data() + x * 2 * i * h / 2;
    const uint8_t* s13 = r.s13.data() + x * 2 * i * h / sfv;
    add_projection(&out.entries, c.kind, base + gate, i, h, w13, s13, g13, ga_gate);
    add_projection(&out.entries, c.kind, base + up, i, h, w13 + i * h / 2, s13 + i * h / sfv, g3,
                   ga_up);
    add_projection(&out.entries, c.kind, base + down, h, i, r.w2.data() + x * h * i / 2,
                   r.s2.data() + x * h * i / sfv, g2, ga_down);
    // The factors as the loaders compute them from what is stored.
    const float stored13 = c.kind == PerExpertKind::kNvfp4ModelOpt ? 1.0f / g13 : g13;
    const float stored3 = c.kind == PerExpertKind::kNvfp4ModelOpt ? 1.0f / g3 : g3;
    const float stored2 = c.kind == PerExpertKind::kNvfp4ModelOpt ? 1.0f / g2 : g2;
    const bool mo = c.kind == PerExpertKind::kNvfp4ModelOpt;
    r.w13_alpha.push_back(!nv ? 1.0f : mo ? stored13 : 1.0f / stored13);
    r.w3_alpha.push_back(!nv ? 1.0f : mo ? stored3 : 1.0f / stored3);
    r.w2_alpha.push_back(!nv ? 1.0f : mo ? stored2 : 1.0f / stored2);
    const float in_gate = mo ? 1.0f / (1.0f / ga_gate) : ga_gate;
    const float in_up = mo ? 1.0f / (1.0f / ga_up) : ga_up;
    r.x_global.push_back(!nv ? 1.0f : std::min(in_gate, in_up));
    r.h_global.push_back(!nv ? 1.0f : mo ? 1.0f / (1.0f / ga_down) : ga_down);
    if (c.bias) {
      std::vector<float> bg, bu, bd;
      for (int64_t n = 0; n < i; ++n) bg.push_back(rng.normal(0.0f, 1.0f));
      for (int64_t n = 0; n < i; ++n) bu.push_back(rng.normal(0.0f, 1.0f));
      for (int64_t n = 0; n < h; ++n) bd.push_back(rng.normal(0.0f, 0.5f));
      out.entries.push_back({base + gate + ".bias", "F32", {i}, f32_bytes(bg)});
      out.entries.push_back({base + up + ".bias", "F32", {i}, f32_bytes(bu)});
      out.entries.push_back({base + down + ".bias", "F32", {h}, f32_bytes(bd)});
      r.b13.insert(r.b13.end(), bg.begin(), bg.end());
      r.b13.insert(r.b13.end(), bu.begin(), bu.end());
      r.b2.insert(r.b2.end(), bd.begin(), bd.end());
    }
  }
  return out;
}

class PerExpertExperts : public ::testing::TestWithParam<PerExpertCase> {};

TEST_P(PerExpertExperts, StacksGateAndUpAndMatchesTheReference) {
  const PerExpertCase c = GetParam();
  TestRng rng;
  const std::string p = "model.layers.3.mlp.experts";
  // E = 4 (index 10 sorts before 2 as text: E = 11 tests the numeric count), H = 64, I = 32.
  for (const int64_t e : {int64_t(4), int64_t(11)}) {
    SCOPED_TRACE("E = " + std::to_string(e));
    PerExpertCheckpoint ck = per_expert_checkpoint(c, p, e, 64, 32, rng);
    LoadedExperts loaded;
    const Status st = load_file(ck.entries, p, &loaded);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(loaded.layout, ExpertsCheckpointLayout::kPerExpert);
    EXPECT_EQ(loaded.gate_up, GateUpLayout::kHalves);
    EXPECT_EQ(loaded.activation, MoeActivation::kSiluGated);
    EXPECT_EQ(loaded.experts.num_experts(), e);
    EXPECT_EQ(loaded.experts.w13_alpha, ck.raw.w13_alpha);
    EXPECT_EQ(loaded.experts.w2_alpha, ck.raw.w2_alpha);
    EXPECT_EQ(loaded.experts.w3_alpha, ck.raw.w3_alpha);
    EXPECT_EQ(loaded.experts.x_global, ck.raw.x_global);
    EXPECT_EQ(loaded.experts.h_global, ck.raw.h_global);
    EXPECT_EQ(loaded.w13_bias, ck.raw.b13);
    EXPECT_EQ(loaded.w2_bias, ck.raw.b2);
    for (const bool q : {false, true}) check_against_reference(loaded, ck.raw, q, !q, rng);
  }
}

std::string per_expert_name(const ::testing::TestParamInfo<PerExpertCase>& info) {
  static const char* kKinds[] = {"Nvfp4CompressedTensors", "Nvfp4ModelOpt",
                                 "Mxfp4CompressedTensors"};
  return std::string(kKinds[int(info.param.kind)]) + (info.param.mixtral_names ? "Mixtral" : "") +
         (info.param.bias ? "Bias" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PerExpertExperts,
    ::testing::Values(PerExpertCase{PerExpertKind::kNvfp4CompressedTensors, false, false},
                      PerExpertCase{PerExpertKind::kNvfp4ModelOpt, false, true},
                      PerExpertCase{PerExpertKind::kMxfp4CompressedTensors, false, false},
                      PerExpertCase{PerExpertKind::kNvfp4CompressedTensors, true, true}),
    per_expert_name);

// The same experts with the blocks as safetensors' F4 (the last extent counts codes) and
// F8_E8M0 scales, and per-expert NVFP4, each sharded round robin over three files with an index
// (one expert's tensors span files): the same outputs as the reference.
TEST(ExpertsCheckpointFiles, ShardedAndF4LoadLikeTheRawTensors) {
  TestRng rng;
  const std::string p = "model.layers.5.mlp.experts";
  const RawExperts raw = gpt_oss_raw(3, 64, 32, rng);
  std::vector<StEntry> entries = gpt_oss_entries(raw, p, true);
  int converted = 0;
  for (StEntry& e : entries) {
    if (e.name.ends_with("_blocks")) {
      e.dtype = "F4";
      e.shape.back() = 32;
      ++converted;
    }
    if (e.name.ends_with("_scales")) e.dtype = "F8_E8M0";
  }
  ASSERT_EQ(converted, 2);
  const PerExpertCheckpoint nv = per_expert_checkpoint(
      {PerExpertKind::kNvfp4CompressedTensors, false, true}, p + "_nv", 3, 64, 32, rng);
  entries.insert(entries.end(), nv.entries.begin(), nv.entries.end());
  testing::TempDir dir;
  dir.write_sharded(entries, 3);
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(dir.path(), &ckpt).ok());
  ASSERT_TRUE(ckpt.sharded());
  LoadedExperts a, b;
  Status st = load_experts(ckpt, p, &a, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  check_against_reference(a, raw, /*quantised=*/false, /*f32_out=*/true, rng);
  st = load_experts(ckpt, p + "_nv", &b, Context{});
  ASSERT_TRUE(st.ok()) << st.to_string();
  check_against_reference(b, nv.raw, /*quantised=*/true, /*f32_out=*/false, rng);
  EXPECT_EQ(list_quantized_experts(ckpt).size(), 2u);
}

// ------------------------------------------------------------------ listing and errors

TEST(ExpertsCheckpointListing, ListsBothLayoutsWithTheirShapes) {
  TestRng rng;
  std::vector<StEntry> all =
      gpt_oss_entries(gpt_oss_raw(2, 64, 32, rng), "model.layers.0.mlp.experts", true);
  const PerExpertCheckpoint ck = per_expert_checkpoint(
      {PerExpertKind::kNvfp4ModelOpt, false, true}, "model.layers.1.mlp.experts", 3, 64, 32, rng);
  all.insert(all.end(), ck.entries.begin(), ck.entries.end());
  TempFile file(write_safetensors(all));
  SafetensorsCheckpoint ckpt;
  ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
  const std::vector<QuantizedExperts> list = list_quantized_experts(ckpt);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].prefix, "model.layers.0.mlp.experts");
  EXPECT_EQ(list[0].layout, ExpertsCheckpointLayout::kGptOss);
  EXPECT_EQ(list[0].format, CheckpointFormat::kMXFP4);
  EXPECT_EQ(list[0].gate_up, GateUpLayout::kInterleaved);
  EXPECT_EQ(list[0].num_experts, 2);
  EXPECT_EQ(list[0].hidden, 64);
  EXPECT_EQ(list[0].intermediate, 32);
  EXPECT_TRUE(list[0].has_bias);
  EXPECT_EQ(list[1].prefix, "model.layers.1.mlp.experts");
  EXPECT_EQ(list[1].layout, ExpertsCheckpointLayout::kPerExpert);
  EXPECT_EQ(list[1].format, CheckpointFormat::kNVFP4ModelOpt);
  EXPECT_EQ(list[1].gate_up, GateUpLayout::kHalves);
  EXPECT_EQ(list[1].num_experts, 3);
  EXPECT_TRUE(list[1].has_bias);
}

// Loads `entries` expecting an error containing every fragment; `out` keeps what it held.
void expect_load_error(const std::vector<StEntry>& entries, const std::string& prefix,
                       const std::vector<std::string>& fragments,
                       ExpertsCheckpointLayout layout = ExpertsCheckpointLayout::kAuto) {
  LoadedExperts out;
  out.w2_bias = {42.0f};
  const Status st = load_file(entries, prefix, &out, layout);
  ASSERT_FALSE(st.ok()) << "expected an error containing '" << fragments[0] << "'";
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  for (const std::string& f : fragments) {
    EXPECT_NE(st.message().find(f), std::string::npos) << st.message() << "\n  wanted: " << f;
  }
  EXPECT_EQ(out.w2_bias, std::vector<float>{42.0f}) << "out was written before the error";
}

StEntry* find_entry(std::vector<StEntry>& v, const std::string& name) {
  for (StEntry& e : v)
    if (e.name == name) return &e;
  ADD_FAILURE() << "no entry " << name;
  static StEntry none;
  return &none;
}

void erase_entry(std::vector<StEntry>& v, const std::string& name) {
  const auto it =
      std::find_if(v.begin(), v.end(), [&](const StEntry& e) { return e.name == name; });
  ASSERT_NE(it, v.end()) << name;
  v.erase(it);
}

TEST(ExpertsCheckpointErrors, GptOssTensorsAreNamed) {
  TestRng rng;
  const std::string p = "model.layers.0.mlp.experts";
  const RawExperts raw = gpt_oss_raw(2, 64, 32, rng);
  const std::vector<StEntry> good = gpt_oss_entries(raw, p, true);
  {
    auto v = good;
    erase_entry(v, p + ".down_proj_scales");
    expect_load_error(v, p, {"'" + p + ".down_proj_scales'", "missing"});
  }
  {
    auto v = good;
    StEntry* b = find_entry(v, p + ".down_proj_blocks");
    b->shape = {2, 64, 2, 8};  // 32 bytes a row, but blocks of 8
    expect_load_error(v, p, {"'" + p + ".down_proj_blocks'", "[E, N, K/32, 16]"});
  }
  {
    auto v = good;
    StEntry* b = find_entry(v, p + ".down_proj_blocks");
    b->shape = {2, 32, 2, 16};  // H = 32 against gate_up's 64
    b->bytes.resize(2 * 32 * 32);
    find_entry(v, p + ".down_proj_scales")->shape = {2, 32, 2};  // the same 128 bytes
    expect_load_error(v, p, {"'" + p + ".down_proj_blocks'", "E, H, I of"});
  }
  {
    auto v = good;
    StEntry* s = find_entry(v, p + ".gate_up_proj_scales");
    s->dtype = "F32";
    s->bytes.resize(2 * 64 * 2 * 4);
    expect_load_error(v, p, {"'" + p + ".gate_up_proj_scales'", "expected dtype U8 or F8_E8M0"});
  }
  {
    auto v = good;
    StEntry* s = find_entry(v, p + ".gate_up_proj_bias");
    s->shape = {2, 32};
    s->bytes.resize(2 * 32 * 2);
    expect_load_error(v, p, {"'" + p + ".gate_up_proj_bias'", "[E, 2I]"});
  }
  {
    auto v = good;
    StEntry* s = find_entry(v, p + ".gate_up_proj_blocks");
    s->shape = {2, 63, 2, 16};
    s->bytes.resize(2 * 63 * 32);
    find_entry(v, p + ".gate_up_proj_scales")->shape = {2, 63, 2};
    find_entry(v, p + ".gate_up_proj_scales")->bytes.resize(2 * 63 * 2);
    expect_load_error(v, p, {"'" + p + ".gate_up_proj_blocks'", "even number of rows"});
  }
  expect_load_error(good, "model.layers.9.mlp.experts",
                    {"prefix 'model.layers.9.mlp.experts'", "no experts"});
  expect_load_error(good, p, {"no experts"}, ExpertsCheckpointLayout::kPerExpert);
}

TEST(ExpertsCheckpointErrors, PerExpertTensorsAreNamed) {
  TestRng rng;
  const std::string p = "model.layers.0.mlp.experts";
  const PerExpertCase c{PerExpertKind::kNvfp4CompressedTensors, false, true};
  const std::vector<StEntry> good = per_expert_checkpoint(c, p, 3, 64, 32, rng).entries;
  {
    auto v = good;  // expert 1 without up_proj
    for (const char* t : {".weight_packed", ".weight_scale", ".weight_global_scale",
                          ".input_global_scale", ".bias"}) {
      erase_entry(v, p + ".1.up_proj" + t);
    }
    expect_load_error(v, p, {"'" + p + ".1.up_proj'", "no quantised weight"});
  }
  {
    auto v = good;  // expert 1's down_proj of another K
    StEntry* w = find_entry(v, p + ".1.down_proj.weight_packed");
    w->shape = {64, 32};
    w->bytes.resize(64 * 32);
    StEntry* s = find_entry(v, p + ".1.down_proj.weight_scale");
    s->shape = {64, 4};
    s->bytes.resize(64 * 4);
    expect_load_error(v, p, {"expert 1", p + ".1.down_proj", "expected [N, K] = [64, 32]"});
  }
  {
    auto v = good;  // expert 2 in ModelOpt's layout
    for (StEntry& e : v) {
      if (e.name == p + ".2.gate_proj.weight_packed") e.name = p + ".2.gate_proj.weight";
      if (e.name == p + ".2.gate_proj.weight_global_scale")
        e.name = p + ".2.gate_proj.weight_scale_2";
    }
    expect_load_error(v, p, {"expert 2", "expected the layout of expert 0"});
  }
  {
    // A name with a huge expert index: E = 10^12 + 1, which fails on expert 3 (missing) before
    // anything of that size is allocated.
    auto v = good;
    v.push_back({p + ".999999999999.gate_proj.weight_packed", "U8", {1}, {0}});
    expect_load_error(v, p, {"'" + p + ".3.gate_proj'", "no quantised weight"});
  }
  {
    auto v = good;  // a missing bias while expert 0 has them
    erase_entry(v, p + ".2.down_proj.bias");
    expect_load_error(v, p, {"'" + p + ".2.down_proj.bias'", "missing"});
  }
  {
    auto v = good;
    StEntry* s = find_entry(v, p + ".0.gate_proj.weight_scale");
    s->dtype = "BF16";
    s->bytes.resize(s->bytes.size() * 2);
    expect_load_error(v, p, {"'" + p + ".0.gate_proj.weight_scale'", "expected dtype F8_E4M3"});
  }
  expect_load_error(good, p, {"'" + p + ".gate_up_proj_blocks'", "missing"},
                    ExpertsCheckpointLayout::kGptOss);
  {
    TempFile file(write_safetensors(good));
    SafetensorsCheckpoint ckpt;
    ASSERT_TRUE(SafetensorsCheckpoint::open(file.path(), &ckpt).ok());
    const Status st = load_experts(ckpt, p, nullptr, Context{});
    EXPECT_NE(st.message().find("out: pointer is null"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace quantkv
