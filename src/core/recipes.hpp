// The scalar quantisation recipes of contract §5, as `__host__ __device__` code (QUANTKV_HD) so the
// CPU and CUDA backends run the very same IEEE operations and agree bit for bit. Each step is
// one correctly rounded fp32 operation: no fused multiply-add, no approximate reciprocal (on the
// device the __f*_rn intrinsics pin that down whatever the compiler flags). The one copy of
// the recipes: the scalar paths (src/ops/quantize.cpp, src/cpu/indexer_quantize.hpp), the
// AVX2 / AVX-512 row kernels (scale computation; their vector value scaling is checked bitwise
// against these) and the CUDA kernels all call it. Internal (not installed).
#pragma once

#include <cstdint>

#include "quantkv/formats.hpp"

namespace quantkv::recipe {

QUANTKV_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
QUANTKV_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// amax = max(amax, |x|); a NaN x is ignored (as fmaxf), so one NaN does not poison a block's
// scale. |x| is taken from the bits (no libm call, identical on host and device).
QUANTKV_HD float amax_update(float amax, float x) {
  const float a = detail::bits_float(detail::float_bits(x) & 0x7FFFFFFFu);
  return a > amax ? a : amax;
}

// NVFP4 block scale (TensorRT-LLM / MAX recipe, contract §5):
//   sf = e4m3_satfinite(g * (amax * fl(1/6)));  out = sf != 0 ? 1 / (sf * fl(1/g)) : 0.
// Each value is then quantised as e2m1(x * out).
struct Nvfp4BlockScale {
  uint8_t sf_bits;  // e4m3
  float out;        // the multiplier applied to each value
};
QUANTKV_HD Nvfp4BlockScale nvfp4_block_scale(float amax, float global_scale) {
  constexpr float kInvE2M1Max = 1.0f / 6.0f;  // fl(1/6), folded at compile time
  const uint8_t sf = float_to_e4m3(mul_rn(global_scale, mul_rn(amax, kInvE2M1Max)));
  const float sf_value = e4m3_to_float(sf);
  const float inv_g = div_rn(1.0f, global_scale);
  const float out = sf_value != 0.0f ? div_rn(1.0f, mul_rn(sf_value, inv_g)) : 0.0f;
  return {sf, out};
}
QUANTKV_HD uint8_t nvfp4_quantize_value(float x, float out) {
  return float_to_e2m1(mul_rn(x, out));
}

// MX block scale: sf = e8m0_roundup(amax / emax), emax = 448 (MXFP8) or 6 (MXFP4).
QUANTKV_HD uint8_t mx_block_scale(float amax, float emax) {
  return float_to_e8m0(div_rn(amax, emax));
}
QUANTKV_HD uint8_t mxfp8_quantize_value(float x, uint8_t sf) {
  return float_to_e4m3(div_rn(x, e8m0_to_float(sf)));
}
QUANTKV_HD uint8_t mxfp4_quantize_value(float x, uint8_t sf) {
  return float_to_e2m1(div_rn(x, e8m0_to_float(sf)));
}

// Indexer K store / Q prepare per-token scale: amax' = max(amax, 1e-4), s = amax' / 448,
// optionally rounded UP to a power of two from the bits (exponent + 1 when the mantissa is
// non-zero). s is a positive normal float here (>= 1e-4 / 448).
QUANTKV_HD float fp8_token_scale(float amax, bool power_of_two) {
  const float clamped = amax > 1e-4f ? amax : 1e-4f;
  const float s = div_rn(clamped, kE4M3Max);
  if (!power_of_two) return s;
  const uint32_t u = detail::float_bits(s);
  if ((u & 0x7FFFFFu) == 0) return s;
  return detail::bits_float((u & 0x7F800000u) + 0x00800000u);
}
QUANTKV_HD uint8_t fp8_token_quantize_value(float x, float s) {
  return float_to_e4m3(div_rn(x, s));
}

// 2^k as a float for k in [-127, 127] (2^-127 is a subnormal).
QUANTKV_HD float pow2_float(int k) {
  return k >= -126 ? detail::bits_float(uint32_t(k + 127) << 23) : detail::bits_float(0x00400000u);
}

// Indexer MXFP4 K cache (vLLM's DeepSeek-V4 insert, _fused_kv_compress_norm_rope_insert_indexer_
// mxfp4_attn): per block of 32, amax' = max(amax, 6 * 2^-126), e = ceil(log2(amax' * fl(1/6)))
// taken exactly from the bits, clamped to [-127, 127]; the byte is e + 127. (The engines'
// approximate lg2 can pick e - 1 for amax' within ~2^-22 above 6 * 2^k; their codes then
// saturate at 6.)
QUANTKV_HD uint8_t mxfp4_index_block_scale(float amax) {
  constexpr float kMinAmax = 6.0f * 1.17549435082228751e-38f;     // 6 * 2^-126, exact
  const float a = amax > kMinAmax ? amax : kMinAmax;              // amax is never NaN
  const uint32_t u = detail::float_bits(mul_rn(a, 1.0f / 6.0f));  // > 0
  const uint32_t ex = u >> 23, m = u & 0x7FFFFFu;
  int e;
  if (ex == 0xFF) {
    e = 128;             // inf
  } else if (ex == 0) {  // subnormal: m * 2^-149
    int c = 0;
    while ((uint32_t(1) << c) < m) ++c;
    e = -149 + c;
  } else {
    e = int(ex) - 127 + (m != 0 ? 1 : 0);
  }
  e = e < -127 ? -127 : e > 127 ? 127 : e;
  return uint8_t(e + 127);
}
// code = e2m1_rn_satfinite(x * 2^-e) (x * 2^-e is one correctly rounded product).
QUANTKV_HD uint8_t mxfp4_index_quantize_value(float x, uint8_t sf) {
  return float_to_e2m1(mul_rn(x, pow2_float(127 - int(sf))));
}

}  // namespace quantkv::recipe
