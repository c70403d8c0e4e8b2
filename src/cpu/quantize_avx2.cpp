// AVX2 rows of quantize_dynamic_block_scaled and of the indexer's per-token e4m3 quantisation:
// the AVX-512 file's method (quantize_avx512.cpp) on 8 lanes. amax is a vmaxps with NaN lanes
// dropped (it returns its second operand when either is NaN), the scales are the scalar
// recipe's code (src/core/recipes.hpp), the values are scaled with the same single IEEE
// multiply or divide, and the encodings are integer bit manipulation equal to float_to_e2m1 /
// float_to_e4m3: every output bit equals the scalar path's.
#include <immintrin.h>

#include <cstring>

#include "core/recipes.hpp"
#include "cpu/quantize_kernels.hpp"
#include "cpu/simd/avx2.hpp"

namespace quantkv::cpu {
namespace {

__m256 load8(const float* x) { return _mm256_loadu_ps(x); }
__m256 load8(const uint16_t* x) { return simd::load_bf16_as_f32(x); }
float to_float(float x) { return x; }
float to_float(uint16_t x) { return bf16_to_float(x); }

__m256i set1(int32_t v) { return _mm256_set1_epi32(v); }
__m256 abs8(__m256 v) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), set1(0x7FFFFFFF)));
}
// acc = max(acc, |v|) lane-wise; a NaN v leaves acc unchanged.
__m256 amax_step(__m256 acc, __m256 v) { return _mm256_max_ps(abs8(v), acc); }
// Lanes are non-negative and never NaN here, so the order of the maxima does not matter.
float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// float_to_e2m1 on 8 lanes: the count of rounding thresholds |x| passes; NaN gives 7.
__m256i e2m1_codes(__m256 x) {
  const __m256 m = abs8(x);
  __m256i code = _mm256_setzero_si256();
  // A passed threshold is an all-ones lane (-1): subtracting it adds 1. The comparison
  // predicate must be a constant expression (clang requires it), hence two helpers.
  auto passed_gt = [&](float t) {
    code = _mm256_sub_epi32(code,
                            _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(t), _CMP_GT_OQ)));
  };
  auto passed_ge = [&](float t) {
    code = _mm256_sub_epi32(code,
                            _mm256_castps_si256(_mm256_cmp_ps(m, _mm256_set1_ps(t), _CMP_GE_OQ)));
  };
  passed_gt(0.25f);
  passed_ge(0.75f);
  passed_gt(1.25f);
  passed_ge(1.75f);
  passed_gt(2.5f);
  passed_ge(3.5f);
  passed_gt(5.0f);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 28), set1(8));
  code = _mm256_or_si256(code, sign);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(m, m, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(code, set1(7), nan);
}

// float_to_e4m3 on 8 lanes (satfinite, round to nearest even).
__m256i e4m3_codes(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), set1(0x80));
  const __m256i a = _mm256_and_si256(u, set1(0x7FFFFFFF));  // >= 0: signed compares work
  const __m256i r = _mm256_sub_epi32(a, set1(120 << 23));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(r, 20), set1(1));
  __m256i code = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(r, set1(0x7FFFF)), odd), 20);
  const __m256i sub = _mm256_cmpgt_epi32(set1(0x3C800000), a);
  const __m256 scaled = _mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(512.0f));
  const __m256i q =
      _mm256_cvttps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  code = _mm256_blendv_epi8(code, q, sub);
  code = _mm256_blendv_epi8(code, set1(0x7E), _mm256_cmpgt_epi32(a, set1(0x43DFFFFF)));
  code = _mm256_or_si256(code, sign);
  return _mm256_blendv_epi8(code, set1(0x7F), _mm256_cmpgt_epi32(a, set1(0x7F800000)));
}

// 8 dwords holding bytes -> 8 bytes.
void store_bytes8(__m256i v, uint8_t* dst) {
  const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(v, v), v);  // lane: 4 bytes, then junk
  const __m256i both = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(both));
}

// 8 e2m1 codes -> 4 bytes (element 2c in the low nibble of byte c).
void store_e2m1_pairs(__m256i codes, uint8_t* dst) {
  const __m256i pairs = _mm256_or_si256(
      codes, _mm256_and_si256(_mm256_srli_epi64(codes, 28), _mm256_set1_epi64x(0xF0)));
  const __m128i even = _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(pairs, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
  const int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packus_epi32(even, even), even));
  std::memcpy(dst, &bytes, 4);
}

template <typename T>
void block_quantize_row(const T* x, int64_t k, BlockFormat f, float g, uint8_t* data, uint8_t* sf) {
  if (f == BlockFormat::kNVFP4) {
    for (int64_t b = 0; b < k / 16; ++b) {
      const __m256 v0 = load8(x + b * 16), v1 = load8(x + b * 16 + 8);
      const float amax = hmax(amax_step(amax_step(_mm256_setzero_ps(), v0), v1));
      const recipe::Nvfp4BlockScale s = recipe::nvfp4_block_scale(amax, g);
      sf[b] = s.sf_bits;
      const __m256 out = _mm256_set1_ps(s.out);
      store_e2m1_pairs(e2m1_codes(_mm256_mul_ps(v0, out)), data + b * 8);
      store_e2m1_pairs(e2m1_codes(_mm256_mul_ps(v1, out)), data + b * 8 + 4);
    }
    return;
  }
  const bool fp8 = f == BlockFormat::kMXFP8;
  const float emax = fp8 ? kE4M3Max : kE2M1Max;
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256 v[4];
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) acc = amax_step(acc, v[j] = load8(x + b * 32 + j * 8));
    const uint8_t code = recipe::mx_block_scale(hmax(acc), emax);
    sf[b] = code;
    // The reciprocal of a power of two is exact: the product equals the recipe's quotient.
    const __m256 inv = _mm256_set1_ps(1.0f / e8m0_to_float(code));
    for (int j = 0; j < 4; ++j) {
      const __m256 y = _mm256_mul_ps(v[j], inv);
      if (fp8) {
        store_bytes8(e4m3_codes(y), data + b * 32 + j * 8);
      } else {
        store_e2m1_pairs(e2m1_codes(y), data + b * 16 + j * 4);
      }
    }
  }
}

template <typename T>
float token_quantize_row(const T* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  const int64_t full = n / 8 * 8;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 8) acc = amax_step(acc, load8(x + i));
  float amax = hmax(acc);
  for (int64_t i = full; i < n; ++i) amax = recipe::amax_update(amax, to_float(x[i]));
  const float s = recipe::fp8_token_scale(amax, mode == ScaleMode::kPowerOfTwo);
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t i = 0; i < full; i += 8)
    store_bytes8(e4m3_codes(_mm256_div_ps(load8(x + i), vs)), codes + i);
  for (int64_t i = full; i < n; ++i) codes[i] = recipe::fp8_token_quantize_value(to_float(x[i]), s);
  return s;
}

}  // namespace

void block_quantize_f32_avx2(const float* x, int64_t k, BlockFormat f, float g, float /*inv_g*/,
                             uint8_t* data, uint8_t* sf) {
  block_quantize_row(x, k, f, g, data, sf);
}
void block_quantize_bf16_avx2(const uint16_t* x, int64_t k, BlockFormat f, float g, float /*inv_g*/,
                              uint8_t* data, uint8_t* sf) {
  block_quantize_row(x, k, f, g, data, sf);
}

float token_quantize_f32_avx2(const float* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  return token_quantize_row(x, n, mode, codes);
}
float token_quantize_bf16_avx2(const uint16_t* x, int64_t n, ScaleMode mode, uint8_t* codes) {
  return token_quantize_row(x, n, mode, codes);
}

}  // namespace quantkv::cpu
