// AVX-512 peak-rate loops (F/BW/VL/DQ/VNNI; the bf16 dot loop, which needs BF16, is in
// ceilings_avx512bf16.cpp): N independent accumulator chains hide the latency of vpdpbusd
// on two ports. The best N differs between cores (8, 12 and 16 are all tried; the caller keeps
// the fastest). The chains are named variables, each made opaque by an empty asm with a
// register operand: an array of accumulators (or a memory clobber) keeps them on the stack and
// measures store forwarding instead, about 2x low.
#include <immintrin.h>

#include "ceilings/ceilings_chains_avx512.hpp"
#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {
namespace {

template <int N>
int64_t int8_dot_loop(int64_t iters, int32_t* sink) {
  static_assert(N == 8 || N == 12 || N == 16);
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  __m512i x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15;
  x0 = x1 = x2 = x3 = x4 = x5 = x6 = x7 = x8 = x9 = x10 = x11 = x12 = x13 = x14 = x15 =
      _mm512_setzero_si512();
#define QUANTKV_INT8_STEP(x)        \
  x = _mm512_dpbusd_epi32(x, a, b); \
  __asm__ volatile("" : "+v"(x))
  for (int64_t i = 0; i < iters; ++i) {
    QUANTKV_CEILING_CHAINS(QUANTKV_INT8_STEP)
  }
#undef QUANTKV_INT8_STEP
  const __m512i sum =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(x0, x1), _mm512_add_epi32(x2, x3)),
                       _mm512_add_epi32(_mm512_add_epi32(x4, x5), _mm512_add_epi32(x6, x7)));
  const __m512i rest =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(x8, x9), _mm512_add_epi32(x10, x11)),
                       _mm512_add_epi32(_mm512_add_epi32(x12, x13), _mm512_add_epi32(x14, x15)));
  // The lanes wrap (they only count); so does the sink, without signed overflow.
  *sink = int32_t(uint32_t(*sink) + uint32_t(_mm512_reduce_add_epi32(_mm512_add_epi32(sum, rest))));
  return iters * N * 64;  // 64 int8 multiply-adds per instruction
}

// f32 FMA on 16 lanes (vfmadd231ps): the sparse MLA kernels' instruction.
template <int N>
int64_t f32_fma_loop(int64_t iters, float* sink) {
  static_assert(N == 8 || N == 12 || N == 16);
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-6f);
  __m512 x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15;
  x0 = x1 = x2 = x3 = x4 = x5 = x6 = x7 = x8 = x9 = x10 = x11 = x12 = x13 = x14 = x15 =
      _mm512_setzero_ps();
#define QUANTKV_FMA_STEP(x)     \
  x = _mm512_fmadd_ps(a, b, x); \
  __asm__ volatile("" : "+v"(x))
  for (int64_t i = 0; i < iters; ++i) {
    QUANTKV_CEILING_CHAINS(QUANTKV_FMA_STEP)
  }
#undef QUANTKV_FMA_STEP
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                                   _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)));
  const __m512 rest =
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x8, x9), _mm512_add_ps(x10, x11)),
                    _mm512_add_ps(_mm512_add_ps(x12, x13), _mm512_add_ps(x14, x15)));
  *sink += _mm512_reduce_add_ps(_mm512_add_ps(sum, rest));
  return iters * N * 16;  // 16 multiply-adds per instruction
}

#undef QUANTKV_CEILING_CHAINS

}  // namespace

int64_t int8_dot_loop_avx512(int accumulators, int64_t iters, int32_t* sink) {
  switch (accumulators) {
    case 8:
      return int8_dot_loop<8>(iters, sink);
    case 16:
      return int8_dot_loop<16>(iters, sink);
    default:
      return int8_dot_loop<12>(iters, sink);
  }
}

// Four independent xor chains of 64-byte loads: 256 bytes in flight per iteration.
uint64_t read_stream_avx512(const uint64_t* data, int64_t words) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= words; i += 32) {
    s0 = _mm512_xor_si512(s0, _mm512_loadu_si512(data + i));
    s1 = _mm512_xor_si512(s1, _mm512_loadu_si512(data + i + 8));
    s2 = _mm512_xor_si512(s2, _mm512_loadu_si512(data + i + 16));
    s3 = _mm512_xor_si512(s3, _mm512_loadu_si512(data + i + 24));
  }
  const __m512i s = _mm512_xor_si512(_mm512_xor_si512(s0, s1), _mm512_xor_si512(s2, s3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, s);
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum ^= lane;
  for (; i < words; ++i) sum ^= data[i];
  return sum;
}

int64_t f32_fma_loop_avx512(int accumulators, int64_t iters, float* sink) {
  switch (accumulators) {
    case 8:
      return f32_fma_loop<8>(iters, sink);
    case 16:
      return f32_fma_loop<16>(iters, sink);
    default:
      return f32_fma_loop<12>(iters, sink);
  }
}

}  // namespace quantkv::ceilings
