// Every code of every format decodes to the value contract §1 gives, computed here independently
// from the bit fields with std::ldexp.
#include <gtest/gtest.h>

#include <cmath>

#include "quantkv/formats.hpp"

namespace quantkv {
namespace {

TEST(FormatsTable, AllE4M3CodesDecodeToSpecValues) {
  for (int code = 0; code < 256; ++code) {
    const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 7;
    const float got = e4m3_to_float(uint8_t(code));
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    const double want = s ? -mag : mag;
    EXPECT_EQ(double(got), want) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(got), bool(s)) << "code 0x" << std::hex << code;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
}

TEST(FormatsTable, AllE8M0CodesDecodeToPowersOfTwo) {
  for (int code = 0; code < 255; ++code) {
    EXPECT_EQ(double(e8m0_to_float(uint8_t(code))), std::ldexp(1.0, code - 127)) << code;
  }
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
}

TEST(FormatsTable, AllE2M1CodesDecodeToSpecValues) {
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int code = 0; code < 16; ++code) {
    const float want = code & 8 ? -mags[code & 7] : mags[code & 7];
    EXPECT_EQ(e2m1_to_float(uint8_t(code)), want) << code;
    EXPECT_EQ(std::signbit(e2m1_to_float(uint8_t(code))), bool(code & 8)) << code;
    EXPECT_EQ(float(e2m1_to_doubled_int8(uint8_t(code))), 2.0f * want) << code;
  }
}

TEST(FormatsTable, E2M1PackingPutsEvenElementInLowNibble) {
  const uint8_t packed[2] = {e2m1_pack(0x1, 0xF), e2m1_pack(0x7, 0x8)};
  EXPECT_EQ(packed[0], 0xF1);
  EXPECT_EQ(e2m1_get(packed, 0), 0x1);
  EXPECT_EQ(e2m1_get(packed, 1), 0xF);
  EXPECT_EQ(e2m1_get(packed, 2), 0x7);
  EXPECT_EQ(e2m1_get(packed, 3), 0x8);
}

TEST(FormatsTable, SpecExamples) {
  EXPECT_EQ(float_to_e4m3(-1e-9f), 0x80);  // underflow keeps the sign
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7E);    // saturates
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_e4m3(NAN) & 0x7F, 0x7F);
  EXPECT_EQ(float_to_e2m1(0.25f), 0x0);
  EXPECT_EQ(float_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.25f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.75f), 0x4);
  EXPECT_EQ(float_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(float_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(float_to_e2m1(INFINITY), 0x7);
  EXPECT_EQ(float_to_e2m1(NAN), 0x7);
  EXPECT_EQ(float_to_e8m0(1.0f), 127);
  EXPECT_EQ(float_to_e8m0(1.5f), 128);  // rounds up
  EXPECT_EQ(float_to_e8m0(INFINITY), 0xFE);
  EXPECT_EQ(float_to_e8m0(NAN), 0xFF);
  EXPECT_EQ(float_to_bf16(NAN), 0x7FFF);
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3F80);  // tie to even
}

TEST(FormatsTable, Bf16AndFp16DecodeRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_float(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp16(f), h);
    const float b = bf16_to_float(uint16_t(h));
    if (!std::isnan(b)) {
      EXPECT_EQ(float_to_bf16(b), h);
    }
  }
}

}  // namespace
}  // namespace quantkv
