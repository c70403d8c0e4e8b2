// Codecs against CUDA's host conversions (cuda_fp8.h, cuda_fp4.h, cuda_bf16.h, cuda_fp16.h):
// special values, every rounding midpoint of every format, and 10^7 random floats drawn across
// all exponents. The exhaustive 2^32 sweep is exhaustive_main.cpp (ctest -L exhaustive).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quantkv/formats.hpp"
#include "test_util.hpp"

#if defined(QUANTKV_HAVE_CUDA_ORACLE)
#include "oracle/cuda_oracle.hpp"
#endif

namespace quantkv {
namespace {

#if !defined(QUANTKV_HAVE_CUDA_ORACLE)
TEST(FormatsOracle, CudaHeadersMissing) {
  GTEST_SKIP() << "ORACLE MISSING: the CUDA toolkit headers (cuda_fp8.h, cuda_fp4.h) were not "
                  "found at configure time; codecs are checked only against the contract tables";
}
#else

std::vector<float> special_values() {
  std::vector<float> v = {
      0.0f,      -0.0f,     INFINITY,         -INFINITY,     NAN,      -NAN,
      448.0f,    464.0f,    464.0001f,        480.0f,        6.0f,     7.0f,
      1e30f,     0x1p-9f,   0x1p-10f,         0x1.8p-10f,    0x1p-6f,  0x1p-126f,
      0x1p-149f, 0x1p-127f, 0x1.000002p-127f, 3.4028235e38f, 65504.0f, 65520.0f};
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

// Every midpoint between adjacent representable values of a format (and its float
// neighbours), from the decoded code values.
std::vector<float> midpoints(const std::vector<float>& grid) {
  std::vector<float> out;
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const float mid = float((double(grid[i]) + double(grid[i + 1])) / 2);
    for (float x : {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)}) {
      out.push_back(x);
      out.push_back(-x);
    }
  }
  return out;
}

std::vector<float> positive_grid(float (*decode)(uint8_t), int codes) {
  std::vector<float> g;
  for (int c = 0; c < codes; ++c) {
    const float v = decode(uint8_t(c));
    if (std::isfinite(v) && !std::signbit(v)) g.push_back(v);
  }
  std::sort(g.begin(), g.end());
  return g;
}

void expect_all_codecs_match(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  SCOPED_TRACE(::testing::Message() << "x = " << x << " (0x" << std::hex << bits << ")");
  ASSERT_EQ(float_to_e4m3(x), oracle::e4m3(x));
  ASSERT_EQ(float_to_e2m1(x), oracle::e2m1(x));
  ASSERT_EQ(float_to_e8m0(x), oracle::e8m0(x));
  ASSERT_EQ(float_to_bf16(x), oracle::bf16(x));
  ASSERT_EQ(float_to_fp16(x), oracle::fp16(x));
}

TEST(FormatsOracle, SpecialValues) {
  for (float x : special_values()) expect_all_codecs_match(x);
}

TEST(FormatsOracle, E4M3Midpoints) {
  for (float x : midpoints(positive_grid(e4m3_to_float, 128))) expect_all_codecs_match(x);
}

TEST(FormatsOracle, E2M1Midpoints) {
  auto decode = [](uint8_t c) { return e2m1_to_float(c); };
  for (float x : midpoints(positive_grid(+decode, 8))) expect_all_codecs_match(x);
}

TEST(FormatsOracle, E8M0AndBf16AndFp16Boundaries) {
  for (int e = -140; e <= 128; ++e) {
    const float p = std::ldexp(1.0f, e);
    for (float x : {p, std::nextafter(p, 0.0f), std::nextafter(p, INFINITY), 1.5f * p}) {
      expect_all_codecs_match(x);
      expect_all_codecs_match(-x);
    }
  }
  // bf16 / fp16 midpoints: odd multiples of half an ulp.
  for (uint32_t h = 0; h < 0x7C00; h += 7) {
    const float lo = fp16_to_float(uint16_t(h)), hi = fp16_to_float(uint16_t(h + 1));
    expect_all_codecs_match(float((double(lo) + double(hi)) / 2));
    const float blo = bf16_to_float(uint16_t(h << 1 | 1)),
                bhi = bf16_to_float(uint16_t((h << 1) + 2));
    expect_all_codecs_match(float((double(blo) + double(bhi)) / 2));
  }
}

// Ten million random floats; one million under AddressSanitizer, where the codecs' memory
// safety is the point and each call costs ~10x (the release build runs the ten million, and
// the exhaustive oracle every float).
#if defined(__SANITIZE_ADDRESS__)
constexpr int kRandomFloats = 1'000'000;
#else
constexpr int kRandomFloats = 10'000'000;
#endif

TEST(FormatsOracle, RandomFloatsAcrossAllExponents) {
  testing::TestRng rng;
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < kRandomFloats; ++i) {
    // Uniform bit patterns cover every exponent equally (and NaNs, infinities, subnormals).
    const uint32_t u = bits(rng.engine());
    float x;
    std::memcpy(&x, &u, 4);
    expect_all_codecs_match(x);
    if (HasFatalFailure()) return;
  }
}

TEST(FormatsOracle, DecodersMatchCuda) {
  for (int c = 0; c < 256; ++c) {
    const float mine = e4m3_to_float(uint8_t(c)), cuda = oracle::e4m3_decode(uint8_t(c));
    if (std::isnan(cuda)) {
      EXPECT_TRUE(std::isnan(mine)) << c;
    } else {
      EXPECT_EQ(mine, cuda) << c;
      EXPECT_EQ(std::signbit(mine), std::signbit(cuda)) << c;
    }
  }
  for (int c = 0; c < 16; ++c)
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), oracle::e2m1_decode(uint8_t(c)));
  for (int c = 0; c < 255; ++c)
    EXPECT_EQ(e8m0_to_float(uint8_t(c)), oracle::e8m0_decode(uint8_t(c)));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float mine = fp16_to_float(uint16_t(h)), cuda = oracle::fp16_decode(uint16_t(h));
    if (std::isnan(cuda)) {
      EXPECT_TRUE(std::isnan(mine));
    } else {
      EXPECT_EQ(mine, cuda) << h;
    }
  }
}
#endif

}  // namespace
}  // namespace quantkv
