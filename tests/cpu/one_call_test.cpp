// The one-call forms of the quantiser and of fused_qk_rope_ragged (QuantizeArgs,
// FusedQkRopeArgs): the same bytes as the fixed forms they wrap, fp32 and bf16, and the
// "exactly one of" errors named. (The indexer's one-call forms: engine_layout_test.cpp; the
// GEMMs': linear_test.cpp, fused_qkv_call_test.cpp, moe_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "quantkv/quantize.hpp"
#include "quantkv/rope.hpp"
#include "quantkv/scale_layout.hpp"
#include "rope_fixture.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

std::string message(const Status& st) { return st.ok() ? std::string("ok") : st.to_string(); }

TEST(OneCall, QuantizeGivesTheFixedFormsBytes) {
  TestRng rng;
  const int64_t M = 5, K = 96;
  std::vector<float> x32(std::size_t(M * K));
  std::vector<bfloat16> x16(x32.size());
  for (std::size_t i = 0; i < x32.size(); ++i) {
    x32[i] = rng.normal(0, 3);
    x16[i].bits = float_to_bf16(rng.normal(0, 3));
  }
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    const auto s = swizzled_scale_shape(M, K / sf_vector_size(f));
    const std::size_t data_bytes = std::size_t(M * row_bytes(f, K)),
                      scale_bytes = std::size_t(s[0] * s[1] * s[2] * s[3] * s[4]);
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(block_format_name(f)) + (bf16 ? " bf16" : " f32"));
      std::vector<uint8_t> want_d(data_bytes), got_d(data_bytes), want_s(scale_bytes),
          got_s(scale_bytes);
      testing::poison(got_d);
      testing::poison(got_s);
      auto dv = [&](std::vector<uint8_t>& d) { return make_view(d.data(), M, row_bytes(f, K)); };
      auto sv = [&](std::vector<uint8_t>& v) {
        return make_view(v.data(), s[0], s[1], s[2], s[3], s[4]);
      };
      QuantizeArgs a;
      a.global_scale = 2.5f;
      a.format = f;
      a.data = dv(got_d);
      a.scales = sv(got_s);
      Status want;
      if (bf16) {
        a.x_bf16 = make_view<const bfloat16>(x16.data(), M, K);
        want = quantize_dynamic_block_scaled(a.x_bf16, 2.5f, f, dv(want_d), sv(want_s), Context{});
      } else {
        a.x = make_view<const float>(x32.data(), M, K);
        want = quantize_dynamic_block_scaled(a.x, 2.5f, f, dv(want_d), sv(want_s), Context{});
      }
      ASSERT_TRUE(want.ok()) << want.to_string();
      const Status st = quantize_dynamic_block_scaled(a, Context{});
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(got_d, want_d);
      EXPECT_EQ(got_s, want_s);
    }
  }
  QuantizeArgs none;
  EXPECT_NE(message(quantize_dynamic_block_scaled(none, Context{}))
                .find("x, x_bf16: expected exactly one of the fp32 and the bf16 rows, got neither"),
            std::string::npos);
  none.x = make_view<const float>(x32.data(), M, K);
  none.x_bf16 = make_view<const bfloat16>(x16.data(), M, K);
  EXPECT_NE(message(quantize_dynamic_block_scaled(none, Context{})).find("got both"),
            std::string::npos);
}

TEST(OneCall, RopeGivesTheFixedFormsBytes) {
  TestRng rng;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    testing::RopeFixture want, got;
    const uint64_t seed = rng.engine()();
    want.build(seed);
    got.build(seed);
    const int64_t T = want.T(), Hq = want.Hq, D = want.D;
    std::vector<bfloat16> q16(want.q.size()), want16(want.q.size()), got16(want.q.size());
    for (std::size_t i = 0; i < q16.size(); ++i) q16[i].bits = float_to_bf16(want.q[i]);
    testing::poison(got16);
    const auto offs = make_view<const uint32_t>(want.offs.data(), int64_t(want.offs.size()));
    FusedQkRopeArgs a;
    a.input_row_offsets = offs;
    a.kv_collection = &got.kv;
    a.layer_idx = got.layer;
    a.options = got.options;
    if (bf16) {
      ASSERT_TRUE(fused_qk_rope_ragged(make_view<const bfloat16>(q16.data(), T, Hq, D), offs,
                                       want.kv, want.options, want.layer,
                                       make_view(want16.data(), T, Hq, D), Context{})
                      .ok());
      a.q_proj_bf16 = make_view<const bfloat16>(q16.data(), T, Hq, D);
      a.output_bf16 = make_view(got16.data(), T, Hq, D);
    } else {
      ASSERT_TRUE(want.run().ok());
      a.q_proj = make_view<const float>(got.q.data(), T, Hq, D);
      a.output = make_view(got.out.data(), T, Hq, D);
    }
    const Status st = fused_qk_rope_ragged(a, Context{});
    ASSERT_TRUE(st.ok()) << st.to_string();
    if (bf16) {
      EXPECT_EQ(0, std::memcmp(got16.data(), want16.data(), want16.size() * sizeof(bfloat16)));
    } else {
      EXPECT_EQ(0, std::memcmp(got.out.data(), want.out.data(), want.out.size() * sizeof(float)));
    }
    EXPECT_EQ(got.cache.raw_blocks(), want.cache.raw_blocks()) << "K rotated differently";
    // A mismatched output type, then no input at all, are named.
    if (bf16) {
      a.output = make_view(got.out.data(), T, Hq, D);
    } else {
      a.output_bf16 = make_view(got16.data(), T, Hq, D);
    }
    EXPECT_NE(message(fused_qk_rope_ragged(a, Context{})).find(bf16 ? "output_bf16:" : "output:"),
              std::string::npos);
    FusedQkRopeArgs none;
    EXPECT_NE(message(fused_qk_rope_ragged(none, Context{}))
                  .find("q_proj, q_proj_bf16: expected exactly one"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace quantkv
