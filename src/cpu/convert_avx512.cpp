// AVX-512 bulk conversions (compiled with the AVX-512 F/BW/VL/DQ/VNNI/BF16 flags).
#include <immintrin.h>

#include "cpu/convert_kernels.hpp"

namespace quantkv::cpu {
namespace {

// 16 e4m3 codes (zero-extended to 32 bits) -> float bits; see convert_avx2.cpp.
__m512i e4m3_to_f32_bits(__m512i code) {
  const __m512i mag = _mm512_and_si512(code, _mm512_set1_epi32(0x7F));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(code, _mm512_set1_epi32(0x80)), 24);
  __m512i bits = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8));
  const __mmask16 is_nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
  bits = _mm512_mask_mov_epi32(
      bits, is_sub,
      _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f))));
  bits = _mm512_mask_mov_epi32(bits, is_nan, _mm512_set1_epi32(0x7FC00000));
  return _mm512_or_si512(bits, sign);
}

}  // namespace

void convert_e4m3_to_f32_avx512(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i code = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm512_storeu_si512(dst + i, e4m3_to_f32_bits(code));
  }
  convert_e4m3_to_f32_scalar(src + i, dst + i, n - i);
}

void convert_e4m3_to_bf16_avx512(const uint8_t* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i code = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    const __m256i bf16 = _mm512_cvtepi32_epi16(_mm512_srli_epi32(e4m3_to_f32_bits(code), 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16);
  }
  convert_e4m3_to_bf16_scalar(src + i, dst + i, n - i);
}

void convert_e2m1_to_doubled_int8_avx512(const uint8_t* packed, int8_t* dst, int64_t n) {
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    // Byte -> word with the low nibble (even element) in the low byte, the high nibble in the
    // high byte; a per-lane pshufb then maps codes to doubled values in element order.
    const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + i / 2)));
    const __m512i idx = _mm512_or_si512(_mm512_and_si512(w, _mm512_set1_epi16(0x000F)),
                                        _mm512_and_si512(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x0F00)));
    _mm512_storeu_si512(dst + i, _mm512_shuffle_epi8(table, idx));
  }
  convert_e2m1_to_doubled_int8_scalar(packed + i / 2, dst + i, n - i);
}

}  // namespace quantkv::cpu
