// AVX2 peak-rate loops for CPUs without AVX-512: f32 FMA and pmaddubsw + pmaddwd.
#include <immintrin.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {

int64_t f32_fma_loop_avx2(int64_t iters, float* sink) {
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-6f);
  __m256 acc[10];
  for (auto& x : acc) x = _mm256_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : acc) {
      x = _mm256_fmadd_ps(a, b, x);
      __asm__ volatile("" : "+x"(x));
    }
  }
  __m256 sum = acc[0];
  for (int k = 1; k < 10; ++k) sum = _mm256_add_ps(sum, acc[k]);
  float out[8];
  _mm256_storeu_ps(out, sum);
  *sink += out[0];
  return iters * 10 * 8;
}

int64_t int8_dot_loop_avx2(int64_t iters, int32_t* sink) {
  const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
  __m256i acc[8];
  for (auto& x : acc) x = _mm256_setzero_si256();
  __m256i bv = b;
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+x"(bv));  // the products must not be hoisted out of the loop
    for (auto& x : acc) {
      x = _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(a, bv), ones));
      __asm__ volatile("" : "+x"(x));
    }
  }
  __m256i sum = acc[0];
  for (int k = 1; k < 8; ++k) sum = _mm256_add_epi32(sum, acc[k]);
  *sink = int32_t(uint32_t(*sink) + uint32_t(_mm256_extract_epi32(sum, 0)));  // wraps, as the lanes do
  return iters * 8 * 32;
}

}  // namespace quantkv::ceilings
