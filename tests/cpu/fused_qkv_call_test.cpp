// The one-call form of the fused QKV (fused_qkv with FusedQkvArgs): each form (plain or prepared
// weight, quantised or bf16 activations) gives the bits of the MAX-named function it wraps, and
// inconsistent parts are named errors that write nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv_test_harness.hpp"
#include "quantkv/qkv_fp4.hpp"

namespace quantkv {
namespace {

using qkv_test::QkvCase;
using qkv_test::QkvShape;
using testing::TestRng;

TEST(FusedQkvOneCall, EveryFormEqualsTheFunctionItWraps) {
  TestRng rng;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    QkvShape s;
    s.format = format;
    s.k = 4 * sf_vector_size(format);
    s.seq_lens = {3, 8};
    s.cache_lens = {2, 0};
    const float f = format == BlockFormat::kMXFP8 ? 1.0f : 0.37f;
    const SectionScales sf = format == BlockFormat::kMXFP8 ? SectionScales::all(1.0f)
                                                           : SectionScales{0.37f, 1.5f, 0.02f};
    QkvCase c = qkv_test::make_case(s, rng);
    std::vector<uint16_t> xb(std::size_t(c.m * s.k));
    for (auto& v : xb) v = float_to_bf16(rng.normal(0.0f, 1.0f));
    const auto xb_view = make_view(reinterpret_cast<const bfloat16*>(xb.data()), c.m, s.k);
    PreparedWeights w;
    ASSERT_TRUE(prepare_qkv_weights(c.weight_view(), c.wscale_view(), format, &w, {}).ok());

    // Runs `call` on a fresh copy of the cache; returns Q and the cache bytes.
    auto run = [&](auto&& call) {
      c.cache.raw_blocks() = c.canary_blocks;
      std::vector<uint16_t> q(std::size_t(c.m * c.q_dim), 0xA5A5);
      const Status st = call(make_view(reinterpret_cast<bfloat16*>(q.data()), c.m, c.q_dim));
      EXPECT_TRUE(st.ok()) << st.to_string();
      return std::make_pair(q, c.cache.raw_blocks());
    };
    const auto kv = c.cache.view();
    FusedQkvArgs a;
    a.input_row_offsets = c.offsets_view();
    a.kv_collection = &kv;
    a.layer_idx = s.layer;

    // Plain weight, one factor.
    const auto plain_one = run([&](TensorView<bfloat16, 2> out) {
      return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
          c.hidden_view(), c.offsets_view(), c.weight_view(), c.iscale_view(), c.wscale_view(), f,
          kv, s.layer, out, format, {});
    });
    EXPECT_EQ(plain_one, run([&](TensorView<bfloat16, 2> out) {
                FusedQkvArgs b = a;
                b.hidden_state = c.hidden_view();
                b.input_scale = c.iscale_view();
                b.weight = c.weight_view();
                b.weight_scale = c.wscale_view();
                b.format = format;
                b.scale = SectionScales::all(f);
                b.output = out;
                return fused_qkv(b, {});
              }));
    // Prepared weight, per-section factors.
    const auto prepared = run([&](TensorView<bfloat16, 2> out) {
      return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
          c.hidden_view(), c.offsets_view(), w, c.iscale_view(), sf, kv, s.layer, out, {});
    });
    EXPECT_EQ(prepared, run([&](TensorView<bfloat16, 2> out) {
                FusedQkvArgs b = a;
                b.hidden_state = c.hidden_view();
                b.input_scale = c.iscale_view();
                b.prepared = &w;
                b.scale = sf;
                b.output = out;
                return fused_qkv(b, {});
              }));
    // Weight-only.
    const auto weight_only = run([&](TensorView<bfloat16, 2> out) {
      return fused_qkv_matmul_weight_only(xb_view, c.offsets_view(), w, sf, kv, s.layer, out, {});
    });
    EXPECT_EQ(weight_only, run([&](TensorView<bfloat16, 2> out) {
                FusedQkvArgs b = a;
                b.hidden_state_bf16 = xb_view;
                b.prepared = &w;
                b.scale = sf;
                b.output = out;
                return fused_qkv(b, {});
              }));
  }
}

TEST(FusedQkvOneCall, InconsistentPartsAreNamedAndWriteNothing) {
  TestRng rng;
  QkvShape s;
  QkvCase c = qkv_test::make_case(s, rng);
  PreparedWeights w;
  ASSERT_TRUE(prepare_qkv_weights(c.weight_view(), c.wscale_view(), s.format, &w, {}).ok());
  std::vector<uint16_t> xb(std::size_t(c.m * s.k), 0);
  std::vector<uint16_t> q(std::size_t(c.m * c.q_dim), 0xA5A5);
  const std::vector<uint16_t> poisoned = q;
  const auto kv = c.cache.view();
  FusedQkvArgs a;
  a.input_row_offsets = c.offsets_view();
  a.kv_collection = &kv;
  a.layer_idx = s.layer;
  a.output = make_view(reinterpret_cast<bfloat16*>(q.data()), c.m, c.q_dim);
  auto expect = [&](const FusedQkvArgs& b, const std::string& fragment) {
    const Status st = fused_qkv(b, {});
    ASSERT_FALSE(st.ok()) << fragment;
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
    EXPECT_TRUE(q == poisoned);
    EXPECT_TRUE(c.cache.raw_blocks() == c.canary_blocks);
  };
  FusedQkvArgs b = a;
  b.prepared = &w;
  expect(b, "hidden_state, hidden_state_bf16: expected exactly one");  // neither
  b.hidden_state = c.hidden_view();
  b.input_scale = c.iscale_view();
  b.hidden_state_bf16 = make_view(reinterpret_cast<const bfloat16*>(xb.data()), c.m, s.k);
  expect(b, "got both");
  b.hidden_state_bf16 = {};
  b.weight = c.weight_view();
  expect(b, "prepared, weight: expected exactly one");
  b.prepared = nullptr;
  b.weight = {};
  expect(b, "got neither");
  b = a;
  b.hidden_state_bf16 = make_view(reinterpret_cast<const bfloat16*>(xb.data()), c.m, s.k);
  b.weight = c.weight_view();
  b.weight_scale = c.wscale_view();
  expect(b, "weight: the weight-only call");
  b = a;
  b.prepared = &w;
  b.hidden_state = c.hidden_view();
  b.input_scale = c.iscale_view();
  b.scale = SectionScales{1.0f, NAN, 1.0f};
  expect(b, "section_sf.k");
  b.scale = SectionScales::all(1.0f);
  b.kv_collection = nullptr;
  expect(b, "kv_collection: pointer is null");
}

}  // namespace
}  // namespace quantkv
