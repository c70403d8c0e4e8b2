// AVX-512 rows of quantize_dynamic_block_scaled and of the indexer's per-token e4m3
// quantisation (K store, Q prepare). Per block (16 values for NVFP4, 32 for MX) the amax is a
// vector max with NaN lanes dropped (vmaxps returns its second operand when either is NaN,
// as the scalar recipe's fmaxf ignores NaN), the scale is the recipe's scalar code
// (src/core/recipes.hpp, the same IEEE operations), and the values are scaled with the same
// single IEEE multiply or divide and encoded with integer bit manipulation equal to
// float_to_e2m1 / float_to_e4m3 (quantkv/formats.hpp). So every output bit equals the scalar
// path's.
#include <immintrin.h>

#include "core/recipes.hpp"
#include "cpu/quantize_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

__m512 load16(const float* x) { return _mm512_loadu_ps(x); }
__m512 load16(const uint16_t* x) { return simd::load_bf16_as_f32(x); }
// The first n (< 16) values, zeros after them (zeros never raise an amax).
__m512 load16_tail(const float* x, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x); }
__m512 load16_tail(const uint16_t* x, __mmask16 m) {
  return simd::bf16_to_f32(_mm256_maskz_loadu_epi16(m, x));
}

__m512 abs16(__m512 v) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}
// acc = max(acc, |v|) lane-wise; a NaN v leaves acc unchanged (vmaxps returns acc then).
__m512 amax_step(__m512 acc, __m512 v) { return _mm512_max_ps(abs16(v), acc); }

// float_to_e2m1 on 16 lanes: the code counts the rounding thresholds |x| passes (the scalar
// chain's branches are monotone), NaN gives 7 without sign; result in each dword's low nibble.
__m512i e2m1_codes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512 m = abs16(x);
  const __m512i one = _mm512_set1_epi32(1);
  __m512i code = _mm512_setzero_si512();
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(0.25f), _CMP_GT_OQ), code,
                               one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(0.75f), _CMP_GE_OQ), code,
                               one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.25f), _CMP_GT_OQ), code,
                               one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.75f), _CMP_GE_OQ), code,
                               one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(2.5f), _CMP_GT_OQ), code,
                               one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(3.5f), _CMP_GE_OQ), code,
                               one);
  code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(5.0f), _CMP_GT_OQ), code,
                               one);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(8));
  code = _mm512_or_si512(code, sign);
  const __mmask16 nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(code, nan, _mm512_set1_epi32(7));
}

// float_to_e4m3 on 16 lanes (satfinite, round to nearest even); code in each dword's low byte.
__m512i e4m3_codes(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  // Normal: rebias the exponent from 127 to 7 and round 23 mantissa bits to 3 (even ties).
  const __m512i r = _mm512_sub_epi32(a, _mm512_set1_epi32(120 << 23));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(1));
  __m512i code =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(r, _mm512_set1_epi32(0x7FFFF)), odd), 20);
  // Below 2^-6: |x| * 2^9 < 8 is exact; its integer rounded to nearest even is the code
  // (0.5 -> 0, 8 -> the smallest normal 0x08), as the scalar's bit rounding does.
  const __mmask16 sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000));
  const __m512 scaled = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f));
  code = _mm512_mask_mov_epi32(
      code, sub, _mm512_cvt_roundps_epi32(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  // >= 448 (inf included) saturates to 0x7E.
  code = _mm512_mask_mov_epi32(code, _mm512_cmpge_epi32_mask(a, _mm512_set1_epi32(0x43E00000)),
                               _mm512_set1_epi32(0x7E));
  code = _mm512_or_si512(code, sign);
  return _mm512_mask_mov_epi32(code, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000)),
                               _mm512_set1_epi32(0x7F));  // NaN: 0x7F whatever the sign
}

// 16 e2m1 codes -> 8 bytes (element 2c in the low nibble of byte c).
void store_e2m1_pairs(__m512i codes, uint8_t* dst) {
  const __m512i pairs = _mm512_or_si512(
      codes, _mm512_and_si512(_mm512_srli_epi64(codes, 28), _mm512_set1_epi64(0xF0)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi64_epi8(pairs));
}

template <typename T>
void block_quantize_row(const T* x, int64_t k, BlockFormat f, float g, float inv_g, uint8_t* data,
                        uint8_t* sf) {
  if (f == BlockFormat::kNVFP4) {
    (void)inv_g;  // recipe::nvfp4_block_scale recomputes fl(1/g), the same value
    for (int64_t b = 0; b < k / 16; ++b) {
      const __m512 v = load16(x + b * 16);
      const float amax = _mm512_reduce_max_ps(amax_step(_mm512_setzero_ps(), v));
      const recipe::Nvfp4BlockScale s = recipe::nvfp4_block_scale(amax, g);
      sf[b] = s.sf_bits;
      store_e2m1_pairs(e2m1_codes(_mm512_mul_ps(v, _mm512_set1_ps(s.out))), data + b * 8);
    }
    return;
  }
  const bool fp8 = f == BlockFormat::kMXFP8;
  const float emax = fp8 ? kE4M3Max : kE2M1Max;
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 v0 = load16(x + b * 32), v1 = load16(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(amax_step(amax_step(_mm512_setzero_ps(), v0), v1));
    const uint8_t code = recipe::mx_block_scale(amax, emax);
    sf[b] = code;
    // x / 2^e: the reciprocal of a power of two is exact, so the product rounds the same
    // exact quotient once, as the scalar path's multiply does.
    const __m512 inv = _mm512_set1_ps(1.0f / e8m0_to_float(code));
    const __m512 y0 = _mm512_mul_ps(v0, inv), y1 = _mm512_mul_ps(v1, inv);
    if (fp8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(data + b * 32),
                       _mm512_cvtepi32_epi8(e4m3_codes(y0)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(data + b * 32 + 16),
                       _mm512_cvtepi32_epi8(e4m3_codes(y1)));
    } else {
      store_e2m1_pairs(e2m1_codes(y0), data + b * 16);
      store_e2m1_pairs(e2m1_codes(y1), data + b * 16 + 8);
    }
  }
}

template <typename T>
float token_quantize_row(const T* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (n - full)) - 1u);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < full; i += 16) acc = amax_step(acc, load16(x + i));
  if (tail != 0) acc = amax_step(acc, load16_tail(x + full, tail));
  const float s =
      recipe::fp8_token_scale(_mm512_reduce_max_ps(acc), mode == ScaleMode::kPowerOfTwo);
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < full; i += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     _mm512_cvtepi32_epi8(e4m3_codes(_mm512_div_ps(load16(x + i), vs))));
  }
  if (tail != 0) {
    _mm512_mask_cvtepi32_storeu_epi8(codes + full, tail,
                                     e4m3_codes(_mm512_div_ps(load16_tail(x + full, tail), vs)));
  }
  return s;
}

}  // namespace

void block_quantize_f32_avx512(const float* x, int64_t k, BlockFormat f, float g, float inv_g,
                               uint8_t* data, uint8_t* sf) {
  block_quantize_row(x, k, f, g, inv_g, data, sf);
}
void block_quantize_bf16_avx512(const uint16_t* x, int64_t k, BlockFormat f, float g, float inv_g,
                                uint8_t* data, uint8_t* sf) {
  block_quantize_row(x, k, f, g, inv_g, data, sf);
}

float token_quantize_f32_avx512(const float* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  return token_quantize_row(x, n, mode, codes);
}
float token_quantize_bf16_avx512(const uint16_t* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  return token_quantize_row(x, n, mode, codes);
}

}  // namespace quantkv::cpu
