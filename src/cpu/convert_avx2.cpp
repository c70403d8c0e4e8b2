// AVX2 bulk conversions (compiled with -mavx2 -mfma -mf16c).
#include <immintrin.h>

#include "cpu/convert_kernels.hpp"
#include "cpu/simd/avx2.hpp"

namespace quantkv::cpu {

using simd::e4m3_to_f32_bits;

void convert_e4m3_to_f32_avx2(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i code =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), e4m3_to_f32_bits(code));
  }
  convert_e4m3_to_f32_scalar(src + i, dst + i, n - i);
}

void convert_e4m3_to_bf16_avx2(const uint8_t* src, uint16_t* dst, int64_t n) {
  const simd::E4m3Bf16Decoder decode;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i words[2], out[2];
    decode(src + i, words);
    simd::E4m3Bf16Decoder::in_order(words, out);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), out[0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), out[1]);
  }
  convert_e4m3_to_bf16_scalar(src + i, dst + i, n - i);
}

void convert_e2m1_to_doubled_int8_avx2(const uint8_t* packed, int8_t* dst, int64_t n) {
  const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0,
                                         1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // Each byte widened to a word; the word's low byte takes the low nibble (element 2c) and
    // its high byte the high nibble (element 2c+1): byte order = element order.
    const __m256i w =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + i / 2)));
    const __m256i idx =
        _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi16(0x000F)),
                        _mm256_and_si256(_mm256_slli_epi16(w, 4), _mm256_set1_epi16(0x0F00)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_shuffle_epi8(table, idx));
  }
  convert_e2m1_to_doubled_int8_scalar(packed + i / 2, dst + i, n - i);
}

}  // namespace quantkv::cpu
