// AVX-512 bulk conversions (compiled with the AVX-512 F/BW/VL/DQ/VNNI/BF16 flags).
#include <immintrin.h>

#include "cpu/convert_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {

// Both conversions run the one AVX-512 e4m3 decoder (simd/avx512.hpp), 16 codes at a time.
namespace {
inline __m256i e4m3x16_to_bf16(const uint8_t* src, __m512i subnormal_table) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm512_castsi512_si256(simd::e4m3_to_bf16(_mm256_zextsi128_si256(codes), subnormal_table));
}
}  // namespace

void convert_e4m3_to_f32_avx512(const uint8_t* src, float* dst, int64_t n) {
  const __m512i table = simd::e4m3_subnormal_bf16_table();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, simd::bf16_to_f32(e4m3x16_to_bf16(src + i, table)));
  convert_e4m3_to_f32_scalar(src + i, dst + i, n - i);
}

void convert_e4m3_to_bf16_avx512(const uint8_t* src, uint16_t* dst, int64_t n) {
  const __m512i table = simd::e4m3_subnormal_bf16_table();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), e4m3x16_to_bf16(src + i, table));
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
    const __m512i w =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + i / 2)));
    const __m512i idx =
        _mm512_or_si512(_mm512_and_si512(w, _mm512_set1_epi16(0x000F)),
                        _mm512_and_si512(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x0F00)));
    _mm512_storeu_si512(dst + i, _mm512_shuffle_epi8(table, idx));
  }
  convert_e2m1_to_doubled_int8_scalar(packed + i / 2, dst + i, n - i);
}

}  // namespace quantkv::cpu
