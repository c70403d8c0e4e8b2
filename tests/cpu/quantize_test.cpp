// quantize_dynamic_block_scaled (contract §5): bit for bit against an independent scalar
// implementation of the recipe written over linear scales, the special blocks (all zero,
// e4m3 saturation, ties), round-trip error bounds, bf16 input, zero padding, bad input.
#include "quantkv/quantize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quantkv/scale_layout.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;
constexpr BlockFormat kFormats[] = {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8};

struct Quantized {
  int64_t m = 0, k = 0, kb = 0;
  std::vector<uint8_t> data;
  std::vector<uint8_t> linear_scales;  // [M, Kb]
  uint8_t code(BlockFormat f, int64_t r, int64_t i) const {
    const int64_t rb = row_bytes(f, k);
    return f == BlockFormat::kMXFP8 ? data[r * rb + i] : e2m1_get(&data[r * rb], i);
  }
};

// The recipe, written independently: one element at a time, linear scales.
Quantized recipe(const std::vector<float>& x, int64_t m, int64_t k, float g, BlockFormat f) {
  Quantized q;
  q.m = m;
  q.k = k;
  const int sfv = sf_vector_size(f);
  q.kb = k / sfv;
  q.data.assign(std::size_t(m * row_bytes(f, k)), 0);
  q.linear_scales.assign(std::size_t(m * q.kb), 0);
  const float inv6 = 1.0f / 6.0f, inv_g = 1.0f / g;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < q.kb; ++b) {
      float amax = 0;
      for (int i = 0; i < sfv; ++i) amax = std::max(amax, std::fabs(x[r * k + b * sfv + i]));
      uint8_t sf;
      for (int i = 0; i < sfv; ++i) {
        const int64_t e = b * sfv + i;
        const float v = x[r * k + e];
        uint8_t code;
        if (f == BlockFormat::kNVFP4) {
          sf = float_to_e4m3(g * (amax * inv6));
          const float sff = e4m3_to_float(sf);
          const float out = sff != 0.0f ? 1.0f / (sff * inv_g) : 0.0f;
          code = float_to_e2m1(v * out);
        } else if (f == BlockFormat::kMXFP4) {
          sf = float_to_e8m0(amax / 6.0f);
          code = float_to_e2m1(v / e8m0_to_float(sf));
        } else {
          sf = float_to_e8m0(amax / 448.0f);
          code = float_to_e4m3(v / e8m0_to_float(sf));
        }
        if (f == BlockFormat::kMXFP8) {
          q.data[r * k + e] = code;
        } else {
          q.data[r * (k / 2) + e / 2] |= uint8_t(code << ((e & 1) * 4));
        }
        q.linear_scales[r * q.kb + b] = sf;
      }
    }
  }
  return q;
}

// Runs the library; returns linear scales and checks the swizzled padding is zero.
Quantized run(const std::vector<float>& x, int64_t m, int64_t k, float g, BlockFormat f) {
  Quantized q;
  q.m = m;
  q.k = k;
  q.kb = k / sf_vector_size(f);
  q.data.assign(std::size_t(m * row_bytes(f, k)), 0xEE);
  std::vector<uint8_t> swz(std::size_t(swizzled_scale_elements(m, q.kb)), 0xEE);
  const Status s = quantize_dynamic_block_scaled(
      make_view<const float>(x.data(), m, k), g, f, make_view(q.data.data(), m, row_bytes(f, k)),
      make_view<uint8_t, 5>(swz.data(), swizzled_scale_shape(m, q.kb)), Context{});
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<uint8_t> real(swz.size(), 0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < q.kb; ++b) real[swizzled_scale_offset(r, b, q.kb)] = 1;
  int64_t nonzero_padding = 0;
  for (std::size_t i = 0; i < swz.size(); ++i) nonzero_padding += !real[i] && swz[i] != 0;
  EXPECT_EQ(nonzero_padding, 0) << "scale padding must be written as zeros";
  q.linear_scales.assign(std::size_t(m * q.kb), 0);
  EXPECT_TRUE(swizzled_to_linear_scales(
                  make_view<const uint8_t, 5>(swz.data(), swizzled_scale_shape(m, q.kb)),
                  make_view(q.linear_scales.data(), m, q.kb))
                  .ok());
  return q;
}

std::vector<float> random_rows(TestRng& rng, int64_t m, int64_t k, bool extremes = false) {
  std::vector<float> x(std::size_t(m * k));
  for (auto& v : x) v = rng.normal() * std::exp2(float(rng.uniform_int(-6, 6)));
  // Some elements of wildly different magnitude, and whole blocks near the float range's
  // ends (subnormal results, scales near 2^±127).
  for (int64_t i = 0; i < m * k; i += 37) x[i] *= 1000.0f;
  for (int64_t i = 0; extremes && i < m * k; ++i) {
    if ((i / 32) % 7 == 3) x[i] *= 1e-38f;
    if ((i / 32) % 11 == 5) x[i] *= 1e30f;
  }
  return x;
}

TEST(Quantize, MatchesIndependentRecipeBitForBit) {
  TestRng rng;
  for (BlockFormat f : kFormats) {
    for (int64_t m : {1, 5, 130}) {
      const int64_t k = sf_vector_size(f) * rng.uniform_int(1, 9);
      SCOPED_TRACE(std::string(block_format_name(f)) + " M=" + std::to_string(m) +
                   " K=" + std::to_string(k));
      const std::vector<float> x = random_rows(rng, m, k, /*extremes=*/true);
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const float g = 448.0f * 6.0f / amax;
      const Quantized want = recipe(x, m, k, g, f);
      const Quantized got = run(x, m, k, g, f);
      EXPECT_TRUE(got.data == want.data);
      EXPECT_TRUE(got.linear_scales == want.linear_scales);
    }
  }
}

TEST(Quantize, Bf16InputEqualsF32InputOfTheSameValues) {
  TestRng rng;
  for (BlockFormat f : kFormats) {
    const int64_t m = 3, k = 64;
    std::vector<float> x = random_rows(rng, m, k);
    std::vector<bfloat16> xb(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      xb[i].bits = float_to_bf16(x[i]);
      x[i] = bf16_to_float(xb[i].bits);
    }
    const Quantized want = run(x, m, k, 3.0f, f);
    std::vector<uint8_t> data(want.data.size()),
        swz(std::size_t(swizzled_scale_elements(m, want.kb)));
    ASSERT_TRUE(quantize_dynamic_block_scaled(
                    make_view<const bfloat16>(xb.data(), m, k), 3.0f, f,
                    make_view(data.data(), m, row_bytes(f, k)),
                    make_view<uint8_t, 5>(swz.data(), swizzled_scale_shape(m, want.kb)), Context{})
                    .ok());
    EXPECT_TRUE(data == want.data) << block_format_name(f);
  }
}

TEST(Quantize, AllZeroBlocksSaturationAndTies) {
  // Row 0: all zero. Row 1 (NVFP4, g = 1): amax 6 gives sf 1.0 and out 1.0, so the e2m1 ties
  // land exactly: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
  // Row 2: huge values: the e4m3 scale saturates to 448.
  const int64_t k = 16;
  std::vector<float> x(3 * k, 0.0f);
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
  const uint8_t tie_codes[] = {0, 2, 2, 4, 4, 6, 6, 7};
  for (int i = 0; i < 8; ++i) {
    x[k + i] = ties[i];
    x[k + 8 + i] = -ties[i];
  }
  for (int i = 0; i < k; ++i) x[2 * k + i] = 1e30f * float(i + 1);
  const Quantized q = run(x, 3, k, 1.0f, BlockFormat::kNVFP4);
  EXPECT_EQ(q.linear_scales[0], 0) << "zero block: scale 0";
  for (int i = 0; i < k; ++i) EXPECT_EQ(q.code(BlockFormat::kNVFP4, 0, i), 0);
  EXPECT_EQ(q.linear_scales[1], 0x38) << "scale 1.0";
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(q.code(BlockFormat::kNVFP4, 1, i), tie_codes[i]) << ties[i];
    EXPECT_EQ(q.code(BlockFormat::kNVFP4, 1, 8 + i), tie_codes[i] | 8) << -ties[i];
  }
  EXPECT_EQ(q.linear_scales[2], 0x7E) << "e4m3 scale saturates at 448";
  EXPECT_EQ(q.code(BlockFormat::kNVFP4, 2, k - 1), 7);
  // MX formats: a zero block gets the smallest e8m0 (2^-127) and zero data.
  for (BlockFormat f : {BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    std::vector<float> z(32, 0.0f);
    const Quantized qz = run(z, 1, 32, 1.0f, f);
    EXPECT_EQ(qz.linear_scales[0], 0);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(qz.code(f, 0, i), 0);
  }
  // MXFP8: amax 448 * 2^3 gives scale 2^3 exactly; a value just above rounds the scale up.
  std::vector<float> y(32, 1.0f);
  y[5] = 448.0f * 8.0f;
  EXPECT_EQ(run(y, 1, 32, 1.0f, BlockFormat::kMXFP8).linear_scales[0], 130);
  y[5] = std::nextafter(448.0f * 8.0f, INFINITY);
  EXPECT_EQ(run(y, 1, 32, 1.0f, BlockFormat::kMXFP8).linear_scales[0], 131);
}

TEST(Quantize, RoundTripErrorBounds) {
  TestRng rng;
  for (BlockFormat f : kFormats) {
    const int64_t m = 16, k = 256;
    const std::vector<float> x = random_rows(rng, m, k);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float g = 448.0f * 6.0f / amax;
    const Quantized q = run(x, m, k, g, f);
    const int sfv = sf_vector_size(f);
    double worst = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        const uint8_t sc = q.linear_scales[r * q.kb + i / sfv];
        const uint8_t c = q.code(f, r, i);
        double xhat, bound;
        const double v = x[r * k + i];
        if (f == BlockFormat::kNVFP4) {
          const double step = double(e4m3_to_float(sc)) / g;  // 1 e2m1 unit in x
          xhat = e2m1_to_float(c) * step;
          // Half the widest e2m1 gap (4 -> 6) is one unit; a scale that e4m3 rounded down
          // (coarsely so when it is an e4m3 subnormal, for blocks far below the global amax)
          // pushes the block's largest values past 6 units, where they saturate.
          bound = std::max(step, std::fabs(v) - 6 * step) * (1 + 1e-6);
        } else if (f == BlockFormat::kMXFP4) {
          const double s = e8m0_to_float(sc);
          xhat = e2m1_to_float(c) * s;
          bound = s;
        } else {
          const double s = e8m0_to_float(sc);
          xhat = e4m3_to_float(c) * s;
          bound = std::fabs(v) / 16 + s * 0x1p-10;
        }
        EXPECT_LE(std::fabs(v - xhat), bound) << "r=" << r << " i=" << i;
        worst = std::max(worst, std::fabs(v - xhat) / bound);
      }
    }
    std::printf("[ info     ] %s worst |x - dequant| / bound = %.3f\n", block_format_name(f),
                worst);
  }
}

TEST(Quantize, BadInputIsNamedAndNothingIsWritten) {
  std::vector<float> x(4 * 48, 1.0f);
  std::vector<uint8_t> data(4 * 48, 0xAB), scales(1024, 0xAB);
  const auto original_data = data;
  const auto original_scales = scales;
  auto call = [&](int64_t k, float g, BlockFormat f, int64_t data_cols,
                  std::array<int64_t, 5> sshape) {
    return quantize_dynamic_block_scaled(make_view<const float>(x.data(), 4, k), g, f,
                                         make_view(data.data(), 4, data_cols),
                                         make_view<uint8_t, 5>(scales.data(), sshape), Context{});
  };
  struct Bad {
    const char* name;
    Status s;
  } cases[] = {
      {"x", call(40, 1.0f, BlockFormat::kNVFP4, 20, swizzled_scale_shape(4, 2))},
      {"x", call(48, 1.0f, BlockFormat::kMXFP4, 24, swizzled_scale_shape(4, 1))},
      {"global_scale", call(48, 0.0f, BlockFormat::kNVFP4, 24, swizzled_scale_shape(4, 3))},
      {"global_scale", call(48, NAN, BlockFormat::kNVFP4, 24, swizzled_scale_shape(4, 3))},
      {"data", call(48, 1.0f, BlockFormat::kNVFP4, 48, swizzled_scale_shape(4, 3))},
      {"scales", call(48, 1.0f, BlockFormat::kNVFP4, 24, swizzled_scale_shape(200, 3))},
      {"format", call(48, 1.0f, BlockFormat(9), 24, swizzled_scale_shape(4, 3))},
  };
  for (const Bad& b : cases) {
    EXPECT_FALSE(b.s.ok()) << b.name;
    EXPECT_NE(b.s.message().find(b.name), std::string::npos) << b.s.to_string();
  }
  EXPECT_TRUE(data == original_data);
  EXPECT_TRUE(scales == original_scales);
  EXPECT_STREQ(block_format_name(BlockFormat::kNVFP4), "NVFP4");
  EXPECT_STREQ(block_format_name(BlockFormat::kMXFP4), "MXFP4");
  EXPECT_STREQ(block_format_name(BlockFormat::kMXFP8), "MXFP8");
}

}  // namespace
}  // namespace quantkv
