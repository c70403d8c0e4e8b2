// The AVX-512 BF16 peak-rate loop (vdpbf16ps; the _avx512bf16 suffix adds -mavx512bf16 to the
// AVX-512 flags): the bf16 dot ceiling of the avx512 level on a CPU with AVX512_BF16 (see
// ceilings_avx512.cpp for the chains).
#include <immintrin.h>

#include "ceilings/ceilings_chains_avx512.hpp"
#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {
namespace {

template <int N>
int64_t bf16_dot_loop(int64_t iters, float* sink) {
  static_assert(N == 8 || N == 12 || N == 16);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3A80);  // 2^-10: stays finite
  __m512 x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15;
  x0 = x1 = x2 = x3 = x4 = x5 = x6 = x7 = x8 = x9 = x10 = x11 = x12 = x13 = x14 = x15 =
      _mm512_setzero_ps();
#define QUANTKV_BF16_STEP(x)     \
  x = _mm512_dpbf16_ps(x, a, b); \
  __asm__ volatile("" : "+v"(x))
  for (int64_t i = 0; i < iters; ++i) {
    QUANTKV_CEILING_CHAINS(QUANTKV_BF16_STEP)
  }
#undef QUANTKV_BF16_STEP
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                                   _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)));
  const __m512 rest =
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)),
                    _mm512_add_ps(_mm512_add_ps(x12, x13), _mm512_add_ps(x14, x15)));
  *sink += _mm512_reduce_add_ps(_mm512_add_ps(sum, rest));
  return iters * N * 32;  // 32 bf16 multiply-adds per instruction
}

#undef QUANTKV_CEILING_CHAINS

}  // namespace

int64_t bf16_dot_loop_avx512bf16(int accumulators, int64_t iters, float* sink) {
  switch (accumulators) {
    case 8:
      return bf16_dot_loop<8>(iters, sink);
    case 16:
      return bf16_dot_loop<16>(iters, sink);
    default:
      return bf16_dot_loop<12>(iters, sink);
  }
}

}  // namespace quantkv::ceilings
