// Peak-rate loops: 12 independent accumulators hide the 4-6 cycle latency of vdpbf16ps and
// vpdpbusd on two ports.
#include <immintrin.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {

int64_t bf16_dot_loop_avx512(int64_t iters, float* sink) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3A80);  // 2^-10: stays finite
  __m512 acc[12];
  for (auto& x : acc) x = _mm512_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : acc) x = _mm512_dpbf16_ps(x, a, b);
    __asm__ volatile("" ::: "memory");
  }
  __m512 sum = acc[0];
  for (int k = 1; k < 12; ++k) sum = _mm512_add_ps(sum, acc[k]);
  *sink += _mm512_reduce_add_ps(sum);
  return iters * 12 * 32;  // 32 bf16 multiply-adds per instruction
}

int64_t int8_dot_loop_avx512(int64_t iters, int32_t* sink) {
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  __m512i acc[12];
  for (auto& x : acc) x = _mm512_setzero_si512();
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : acc) x = _mm512_dpbusd_epi32(x, a, b);
    __asm__ volatile("" ::: "memory");
  }
  __m512i sum = acc[0];
  for (int k = 1; k < 12; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  *sink += _mm512_reduce_add_epi32(sum);
  return iters * 12 * 64;  // 64 int8 multiply-adds per instruction
}

}  // namespace quantkv::ceilings
