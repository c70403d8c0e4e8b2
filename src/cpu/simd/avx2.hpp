// Internal: the AVX2 building blocks of the *_avx2.cpp microkernels, one copy each: the e4m3
// decoder and bf16 -> f32 widening. Include only from translation units compiled with the
// AVX2 flags (internal linkage: see qkv_kernels.hpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace quantkv::cpu::simd {
namespace {

// The AVX2 e4m3 decoder: 8 e4m3 codes (zero-extended to 32 bits) -> float bits (exact; the
// same bits as formats.hpp's e4m3_to_float). Normals by exponent rebias, subnormals as
// m * 2^-9 from an integer (no float subnormals: safe under FTZ/DAZ), NaN the canonical one.
inline __m256i e4m3_to_f32_bits(__m256i code) {
  const __m256i mag = _mm256_and_si256(code, _mm256_set1_epi32(0x7F));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x80)), 24);
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256i sub =
      _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f)));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag);
  const __m256i is_nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F));
  __m256i bits = _mm256_blendv_epi8(normal, sub, is_sub);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), is_nan);
  return _mm256_or_si256(bits, sign);
}

// 8 bf16 (bits, in a 128-bit register) -> 8 floats (exact).
inline __m256 bf16_to_f32(__m128i bf16) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}
// 8 bf16 at p (unaligned) -> 8 floats.
inline __m256 load_bf16_as_f32(const uint16_t* p) {
  return bf16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// n bf16 at src (n a multiple of 8) -> n floats at dst (32-byte aligned).
inline void widen_bf16_aligned(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 8) _mm256_store_ps(dst + i, load_bf16_as_f32(src + i));
}

}  // namespace
}  // namespace quantkv::cpu::simd
