// The element types (DType) and block-scaled formats (BlockFormat) every header names, and the
// number formats of contract §1: float8_e4m3fn, float8_e8m0fnu, float4_e2m1fn (packed pairs),
// bfloat16 and float16. Every conversion here is bit-exact with CUDA's host conversions
// (cuda_fp8.h / cuda_fp4.h / cuda_bf16.h / cuda_fp16.h); tests/oracle/formats_oracle_test.cpp
// checks that. The scalar codecs are header-only and `__host__ __device__` so the CUDA
// backend shares them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QUANTKV_HD __host__ __device__ __forceinline__
#else
// Internal linkage on the host: these helpers are also compiled into the AVX2 / AVX-512
// translation units, and an `inline` (COMDAT) copy built with those flags could be the one the
// linker keeps for the scalar path, which must run on every CPU.
#define QUANTKV_HD static inline
#endif

namespace quantkv {

// Element types of a cache (and of other runtime-typed buffers).
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kE4M3 = 3 };
const char* dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);

// The block-scaled formats of the fused QKV projection.
enum class BlockFormat : int {
  kNVFP4 = 0,  // packed e2m1 data, e4m3 scales, 16 values per scale
  kMXFP4 = 1,  // packed e2m1 data, e8m0 scales, 32 values per scale
  kMXFP8 = 2,  // e4m3 data (one byte per value), e8m0 scales, 32 values per scale
};
const char* block_format_name(BlockFormat format);
inline int sf_vector_size(BlockFormat f) { return f == BlockFormat::kNVFP4 ? 16 : 32; }
inline bool has_e8m0_scales(BlockFormat f) { return f != BlockFormat::kNVFP4; }
// Bytes of a row of K values: K/2 for packed fp4, K for MXFP8.
inline int64_t row_bytes(BlockFormat f, int64_t k) { return f == BlockFormat::kMXFP8 ? k : k / 2; }

// Storage types: one struct per format so a TensorView says what its bytes mean.
struct float8_e4m3fn {
  uint8_t bits;
};
struct float8_e8m0fnu {
  uint8_t bits;
};
struct float4_e2m1x2 {
  uint8_t bits;
};  // two e2m1 values: low nibble = even element
struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};
static_assert(sizeof(float8_e4m3fn) == 1 && sizeof(float8_e8m0fnu) == 1);
static_assert(sizeof(float4_e2m1x2) == 1 && sizeof(bfloat16) == 2 && sizeof(float16) == 2);

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;

namespace detail {
QUANTKV_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
QUANTKV_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

// ---------------------------------------------------------------- float8_e4m3fn
// s.eeee.mmm, bias 7, no infinity, 0x7F/0xFF are NaN, max ±448.

// Decode. Normals: rebias the exponent (7 -> 127) by adding 120 << 23 to the shifted bits.
// Subnormals: m * 2^-9 from an integer, so no float subnormal is touched and the result is
// right even when the caller runs with flush-to-zero / denormals-are-zero.
QUANTKV_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t mag = b & 0x7Fu;
  if (mag == 0x7Fu) return detail::bits_float(sign | 0x7FC00000u);
  if (mag < 8u) return detail::bits_float(detail::float_bits(float(mag) * 0x1p-9f) | sign);
  return detail::bits_float(sign | ((mag << 20) + (120u << 23)));
}

// Encode with round-to-nearest-even and saturation (CUDA's __NV_SATFINITE): finite values
// beyond ±448 and ±inf give ±448, NaN gives 0x7F, values that round to zero keep the sign.
QUANTKV_HD uint8_t float_to_e4m3(float x) {
  const uint32_t u = detail::float_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;                   // NaN
  if (a >= 0x43E00000u) return uint8_t(sign | 0x7E);  // >= 448 (incl. inf) saturates
  if (a < 0x3C800000u) {                              // < 2^-6: subnormal e4m3 grid of 2^-9
    // a * 2^9 < 8 is exact in float; round its integer part to nearest even by bits.
    const float scaled = detail::bits_float(a) * 512.0f;
    const uint32_t s = detail::float_bits(scaled);
    if (scaled <= 0.5f) return sign;  // 0.5 is a tie and rounds to even 0
    // scaled in (0.5, 8): round to an integer via the float's bits.
    const int exp = int((s >> 23) & 0xFF) - 127;  // -1..2
    const uint32_t mant = (s & 0x7FFFFFu) | 0x800000u;
    const int shift = 23 - exp;  // bits below the integer point
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint8_t(sign | q);  // q == 8 is the smallest normal, code 0x08
  }
  // Normal: rebias the exponent from 127 to 7, then round 23 mantissa bits to 3.
  const uint32_t r = a - (120u << 23);
  const uint32_t rounded = r + 0x7FFFFu + ((r >> 20) & 1u);
  return uint8_t(sign | (rounded >> 20));
}

// e4m3 is exact in bf16: the decoded float's top half.
QUANTKV_HD uint16_t e4m3_to_bf16_bits(uint8_t b) {
  return uint16_t(detail::float_bits(e4m3_to_float(b)) >> 16);
}

// ---------------------------------------------------------------- float8_e8m0fnu
// 2^(e-127); 0xFF is NaN; no zero, no sign. Only a scale type.
QUANTKV_HD float e8m0_to_float(uint8_t b) {
  if (b == 0xFF) return detail::bits_float(0x7FC00000u);
  if (b == 0) return detail::bits_float(0x00400000u);  // 2^-127, a float subnormal
  return detail::bits_float(uint32_t(b) << 23);
}

// Encode as CUDA __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf): the sign is
// ignored, the magnitude is rounded up to the next power of two from its bits.
QUANTKV_HD uint8_t float_to_e8m0(float x) {
  const uint32_t a = detail::float_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0xFF;   // NaN
  if (a == 0x7F800000u) return 0xFE;  // inf saturates
  uint32_t e = a >> 23;
  const uint32_t m = a & 0x7FFFFFu;
  if (e == 0) {
    // Subnormal: 2^-127 is code 0 (mantissa 0x400000); anything above rounds up to 2^-126.
    return m > 0x400000u ? 1 : 0;
  }
  if (m != 0) ++e;
  return uint8_t(e > 0xFE ? 0xFE : e);
}

// ---------------------------------------------------------------- float4_e2m1fn
// s.ee.m: 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7, codes 8..15 negate; no NaN/inf.
QUANTKV_HD float e2m1_to_float(uint8_t code) {
  constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMag[code & 7u];
  return (code & 8u) ? -v : v;
}

// Twice an e2m1 value is an integer in [-12, 12]: the int8 fast paths multiply these.
QUANTKV_HD int8_t e2m1_to_doubled_int8(uint8_t code) {
  constexpr int8_t kMag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const int8_t v = kMag[code & 7u];
  return (code & 8u) ? int8_t(-v) : v;
}

// Encode with round-to-nearest-even, saturating to ±6 (CUDA cudaRoundNearest).
// Ties: 0.25→0, 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4. NaN gives code 7.
QUANTKV_HD uint8_t float_to_e2m1(float x) {
  const uint32_t u = detail::float_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7;
  const uint8_t sign = uint8_t((u >> 28) & 0x8u);
  const float m = detail::bits_float(a);
  uint8_t code;
  if (m <= 0.25f)
    code = 0;
  else if (m < 0.75f)
    code = 1;
  else if (m <= 1.25f)
    code = 2;
  else if (m < 1.75f)
    code = 3;
  else if (m <= 2.5f)
    code = 4;
  else if (m < 3.5f)
    code = 5;
  else if (m <= 5.0f)
    code = 6;
  else
    code = 7;
  return uint8_t(sign | code);
}

// Packed pairs: element 2c in bits 0-3, element 2c+1 in bits 4-7 of byte c.
QUANTKV_HD uint8_t e2m1_get(const uint8_t* packed, int64_t i) {
  return uint8_t((packed[i >> 1] >> ((i & 1) * 4)) & 0xFu);
}
QUANTKV_HD uint8_t e2m1_pack(uint8_t even, uint8_t odd) {
  return uint8_t((even & 0xFu) | ((odd & 0xFu) << 4));
}

// ---------------------------------------------------------------- bfloat16
QUANTKV_HD float bf16_to_float(uint16_t b) { return detail::bits_float(uint32_t(b) << 16); }

// Round to nearest even; NaN becomes 0x7FFF (CUDA's canonical NaN).
QUANTKV_HD uint16_t float_to_bf16(float x) {
  const uint32_t u = detail::float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---------------------------------------------------------------- float16 (IEEE binary16)
QUANTKV_HD float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return detail::bits_float(sign | 0x7F800000u | (m << 13));
  if (e == 0) {  // subnormal or zero: m * 2^-24, exact in float
    const float v = float(m) * 0x1p-24f;
    return detail::bits_float(detail::float_bits(v) | sign);
  }
  return detail::bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Round to nearest even, overflow to ±inf, NaN becomes 0x7FFF (CUDA's __float2half_rn).
QUANTKV_HD uint16_t float_to_fp16(float x) {
  const uint32_t u = detail::float_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                                  // < 2^-14: subnormal grid of 2^-24
    // a * 2^24 < 1024 is exact; round to an integer, nearest even, by bits.
    const float scaled = detail::bits_float(a) * 0x1p24f;
    if (scaled <= 0.5f) return sign;  // 0.5 is a tie and rounds to even 0
    const uint32_t s = detail::float_bits(scaled);
    const int exp = int((s >> 23) & 0xFF) - 127;  // -1..9
    if (exp < 0) return uint16_t(sign | 1u);      // (0.5, 1)
    const uint32_t mant = (s & 0x7FFFFFu) | 0x800000u;
    const int shift = 23 - exp;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  const uint32_t r = a - (112u << 23);
  const uint32_t rounded = r + 0xFFFu + ((r >> 13) & 1u);
  return uint16_t(sign | (rounded >> 13));
}

// ---------------------------------------------------------------- bulk row conversions
// Vectorised for every ISA the CPU has (chosen once, see cpu_features.hpp); every path gives
// the same bits as the scalar codecs above.

// dst[i] = bf16 bits of e4m3 src[i]  (exact)
void convert_e4m3_to_bf16(const uint8_t* src, uint16_t* dst, int64_t n);
// dst[i] = float of e4m3 src[i]  (exact)
void convert_e4m3_to_f32(const uint8_t* src, float* dst, int64_t n);
// n values (n even) from n/2 packed bytes to doubled codes: dst[i] = 2 * e2m1(element i)
void convert_e2m1_to_doubled_int8(const uint8_t* packed, int8_t* dst, int64_t n);

}  // namespace quantkv
