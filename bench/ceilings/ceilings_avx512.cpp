// Peak-rate loops: N independent accumulators hide the latency of vdpbf16ps and vpdpbusd on
// two ports. The empty asm keeps each chain opaque without a memory clobber, which would force
// the accumulators through the stack every iteration and read the ceiling 2x low. The best N differs between cores (8, 12 and 16 are all tried; the caller keeps
// the fastest), so no kernel can look better than the machine only because the loop was slow.
#include <immintrin.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {
namespace {

template <int N>
int64_t bf16_dot_loop(int64_t iters, float* sink) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3A80);  // 2^-10: stays finite
  __m512 acc[N];
  for (auto& x : acc) x = _mm512_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : acc) {
      x = _mm512_dpbf16_ps(x, a, b);
      __asm__ volatile("" : "+v"(x));  // opaque, yet stays in a register (no memory clobber)
    }
  }
  __m512 sum = acc[0];
  for (int k = 1; k < N; ++k) sum = _mm512_add_ps(sum, acc[k]);
  *sink += _mm512_reduce_add_ps(sum);
  return iters * N * 32;  // 32 bf16 multiply-adds per instruction
}

template <int N>
int64_t int8_dot_loop(int64_t iters, int32_t* sink) {
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  __m512i acc[N];
  for (auto& x : acc) x = _mm512_setzero_si512();
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : acc) {
      x = _mm512_dpbusd_epi32(x, a, b);
      __asm__ volatile("" : "+v"(x));
    }
  }
  __m512i sum = acc[0];
  for (int k = 1; k < N; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  *sink += _mm512_reduce_add_epi32(sum);
  return iters * N * 64;  // 64 int8 multiply-adds per instruction
}

}  // namespace

int64_t bf16_dot_loop_avx512(int accumulators, int64_t iters, float* sink) {
  switch (accumulators) {
    case 8: return bf16_dot_loop<8>(iters, sink);
    case 16: return bf16_dot_loop<16>(iters, sink);
    default: return bf16_dot_loop<12>(iters, sink);
  }
}

int64_t int8_dot_loop_avx512(int accumulators, int64_t iters, int32_t* sink) {
  switch (accumulators) {
    case 8: return int8_dot_loop<8>(iters, sink);
    case 16: return int8_dot_loop<16>(iters, sink);
    default: return int8_dot_loop<12>(iters, sink);
  }
}

}  // namespace quantkv::ceilings
