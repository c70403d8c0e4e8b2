// Internal: the AVX-512 building blocks of the *_avx512.cpp microkernels, one copy each: the
// e4m3 decoder, bf16 -> f32 widening and the 16 x 16 dword transpose. Include only from
// translation units compiled with the AVX-512 flags (internal linkage: see qkv_kernels.hpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace quantkv::cpu::simd {
namespace {

// The vpermw table of e4m3_to_bf16: bf16 bits of the 8 e4m3 magnitudes below 2^-6 (m * 2^-9,
// index m = the code's low 3 bits); the other 24 entries are never selected.
inline __m512i e4m3_subnormal_bf16_table() {
  alignas(64) static constexpr uint16_t kSubnormals[32] = {0,      0x3B00, 0x3B80, 0x3BC0,
                                                           0x3C00, 0x3C20, 0x3C40, 0x3C60};
  return _mm512_load_si512(kSubnormals);
}

// The AVX-512 e4m3 decoder: 32 e4m3 codes -> 32 bf16 (exact; the same bits as formats.hpp's
// e4m3_to_bf16_bits). Normals rebias the exponent (add 120 << 7 to the shifted bits), the
// seven subnormal magnitudes come from `subnormal_table` (e4m3_subnormal_bf16_table()), NaN
// becomes the canonical 0x7FC0, then the sign. About 10 ops per 32 values.
inline __m512i e4m3_to_bf16(__m256i codes, __m512i subnormal_table) {
  const __m512i c = _mm512_cvtepu8_epi16(codes);
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi16(0x7F));
  __m512i bits = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
  const __mmask32 sub = _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8));
  bits = _mm512_mask_permutexvar_epi16(bits, sub, mag, subnormal_table);
  const __mmask32 nan = _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F));
  bits = _mm512_mask_mov_epi16(bits, nan, _mm512_set1_epi16(0x7FC0));
  const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(c, _mm512_set1_epi16(0x80)), 8);
  return _mm512_or_si512(bits, sign);
}

// 16 bf16 (bits, in a 256-bit register) -> 16 floats (exact).
inline __m512 bf16_to_f32(__m256i bf16) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16));
}
// 16 bf16 at p (unaligned) -> 16 floats.
inline __m512 load_bf16_as_f32(const uint16_t* p) {
  return bf16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// In-register 16 x 16 dword transpose: r[i] holds row i; afterwards r[j] holds column j.
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // r[4g + x], 128-bit lane L: rows 4g..4g+3, column 4L + x.
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // For each x, a 4 x 4 transpose of 128-bit blocks: out[4L + x] = lanes L of r[x], r[4+x], ...
  for (int x = 0; x < 4; ++x) {
    const __m512i u0 = _mm512_shuffle_i32x4(r[x], r[4 + x], 0x44);
    const __m512i u1 = _mm512_shuffle_i32x4(r[x], r[4 + x], 0xEE);
    const __m512i u2 = _mm512_shuffle_i32x4(r[8 + x], r[12 + x], 0x44);
    const __m512i u3 = _mm512_shuffle_i32x4(r[8 + x], r[12 + x], 0xEE);
    t[x] = _mm512_shuffle_i32x4(u0, u2, 0x88);
    t[4 + x] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
    t[8 + x] = _mm512_shuffle_i32x4(u1, u3, 0x88);
    t[12 + x] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace
}  // namespace quantkv::cpu::simd
