// AVX2 peak-rate loops for CPUs without AVX-512: f32 FMA, pmaddubsw + pmaddwd + paddd, and a
// streaming read. Like the AVX-512 loops, every chain is a named variable kept in a register by
// an empty asm on it after each step: an array of accumulators is kept on the stack and
// measures store forwarding instead (the bench printed 2.5x too low a f32 rate that way).
// Check with `objdump -d --no-show-raw-insn` that the inner loops have no loads or stores.
#include <immintrin.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {
namespace {

// Applies `step` to chains x0..x(N-1) in one iteration. 16 ymm registers: at most 12 chains
// leave room for the operands and the int8 loop's temporaries.
#define QUANTKV_CEILING_CHAINS(step) \
  step(x0);                          \
  step(x1);                          \
  step(x2);                          \
  step(x3);                          \
  step(x4);                          \
  step(x5);                          \
  if constexpr (N > 6) {             \
    step(x6);                        \
    step(x7);                        \
  }                                  \
  if constexpr (N > 8) {             \
    step(x8);                        \
    step(x9);                        \
  }                                  \
  if constexpr (N > 10) {            \
    step(x10);                       \
    step(x11);                       \
  }

// f32 FMA: latency 4-5 x 2 ports needs 8-10 chains.
template <int N>
int64_t f32_fma_loop(int64_t iters, float* sink) {
  static_assert(N == 6 || N == 8 || N == 10 || N == 12);
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-6f);
  __m256 x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11;
  x0 = x1 = x2 = x3 = x4 = x5 = x6 = x7 = x8 = x9 = x10 = x11 = _mm256_setzero_ps();
#define QUANTKV_FMA_STEP(x)     \
  x = _mm256_fmadd_ps(a, b, x); \
  __asm__ volatile("" : "+x"(x))
  for (int64_t i = 0; i < iters; ++i) {
    QUANTKV_CEILING_CHAINS(QUANTKV_FMA_STEP)
  }
#undef QUANTKV_FMA_STEP
  const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                                   _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
  const __m256 rest = _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11));
  *sink += _mm256_cvtss_f32(_mm256_add_ps(sum, rest));
  return iters * N * 8;  // 8 multiply-adds per instruction
}

// pmaddubsw + paddw, the AVX2 fp4 kernels' inner step: 32 int8 multiply-adds per step, summed
// in int16 lanes (the kernels widen them with one pmaddwd per block, SFV / 4 steps, which this
// peak leaves out; the ceiling was pmaddubsw + pmaddwd + paddd per step until the kernels
// dropped the per-step pmaddwd, which on Zen 3 runs about 1.4x slower). The product of two
// loop-invariant operands is the same for every chain, so the compiler would compute it once per
// iteration and share it (a ceiling 2-3x too high): the empty asm before every step makes the
// operand opaque, so each step multiplies anew.
template <int N>
int64_t int8_dot_loop(int64_t iters, int32_t* sink) {
  static_assert(N == 6 || N == 8 || N == 10);
  const __m256i a = _mm256_set1_epi8(1);
  __m256i b = _mm256_set1_epi8(1);
  __m256i x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11;
  x0 = x1 = x2 = x3 = x4 = x5 = x6 = x7 = x8 = x9 = x10 = x11 = _mm256_setzero_si256();
#define QUANTKV_INT8_STEP(x)                           \
  __asm__ volatile("" : "+x"(b));                      \
  x = _mm256_add_epi16(x, _mm256_maddubs_epi16(a, b)); \
  __asm__ volatile("" : "+x"(x))
  for (int64_t i = 0; i < iters; ++i) {
    QUANTKV_CEILING_CHAINS(QUANTKV_INT8_STEP)
  }
#undef QUANTKV_INT8_STEP
  const __m256i sum =
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(x0, x1), _mm256_add_epi32(x2, x3)),
                       _mm256_add_epi32(_mm256_add_epi32(x4, x5), _mm256_add_epi32(x6, x7)));
  const __m256i rest = _mm256_add_epi32(_mm256_add_epi32(x8, x9), _mm256_add_epi32(x10, x11));
  // The lanes wrap (they only count); so does the sink, without signed overflow.
  *sink = int32_t(uint32_t(*sink) + uint32_t(_mm256_cvtsi256_si32(_mm256_add_epi32(sum, rest))));
  return iters * N * 32;  // 32 int8 multiply-adds per step
}

#undef QUANTKV_CEILING_CHAINS

}  // namespace

int64_t f32_fma_loop_avx2(int accumulators, int64_t iters, float* sink) {
  switch (accumulators) {
    case 6:
      return f32_fma_loop<6>(iters, sink);
    case 8:
      return f32_fma_loop<8>(iters, sink);
    case 12:
      return f32_fma_loop<12>(iters, sink);
    default:
      return f32_fma_loop<10>(iters, sink);
  }
}

int64_t int8_dot_loop_avx2(int accumulators, int64_t iters, int32_t* sink) {
  switch (accumulators) {
    case 6:
      return int8_dot_loop<6>(iters, sink);
    case 10:
      return int8_dot_loop<10>(iters, sink);
    default:
      return int8_dot_loop<8>(iters, sink);
  }
}

// Four independent xor chains of 32-byte loads: 128 bytes in flight per iteration.
uint64_t read_stream_avx2(const uint64_t* data, int64_t words) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 16 <= words; i += 16) {
    const __m256i* p = reinterpret_cast<const __m256i*>(data + i);
    s0 = _mm256_xor_si256(s0, _mm256_loadu_si256(p));
    s1 = _mm256_xor_si256(s1, _mm256_loadu_si256(p + 1));
    s2 = _mm256_xor_si256(s2, _mm256_loadu_si256(p + 2));
    s3 = _mm256_xor_si256(s3, _mm256_loadu_si256(p + 3));
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
  uint64_t sum = uint64_t(_mm256_extract_epi64(s, 0)) ^ uint64_t(_mm256_extract_epi64(s, 1)) ^
                 uint64_t(_mm256_extract_epi64(s, 2)) ^ uint64_t(_mm256_extract_epi64(s, 3));
  for (; i < words; ++i) sum ^= data[i];
  return sum;
}

}  // namespace quantkv::ceilings
