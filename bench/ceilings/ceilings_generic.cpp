// Peak-rate loops for the scalar ISA level: 128-bit vectors of the baseline ISA (SSE2 on
// x86-64, NEON on aarch64), since the compiler may vectorise the scalar kernels that far.
// Named chains in registers, as in the AVX2 and AVX-512 loops; the multiplied operand is made
// opaque before every step so each step multiplies anew (a loop-invariant product would be
// computed once and shared) and the multiply stays off the chain, which then waits only on the
// add's latency.
#include <cstdint>
#include <cstring>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {
namespace {

typedef float F32x4 __attribute__((vector_size(16)));
typedef uint16_t U16x8 __attribute__((vector_size(16)));  // unsigned: lanes wrap, no UB

#if defined(__x86_64__) || defined(__i386__)
#define QUANTKV_OPAQUE(x) __asm__ volatile("" : "+x"(x))
#elif defined(__aarch64__)
#define QUANTKV_OPAQUE(x) __asm__ volatile("" : "+w"(x))
#else
#define QUANTKV_OPAQUE(x) __asm__ volatile("" : "+m"(x))  // no vector registers to name
#endif

#define QUANTKV_CEILING_CHAINS(step) \
  step(x0);                          \
  step(x1);                          \
  step(x2);                          \
  step(x3);                          \
  step(x4);                          \
  step(x5);                          \
  step(x6);                          \
  step(x7);                          \
  if constexpr (N > 8) {             \
    step(x8);                        \
    step(x9);                        \
    step(x10);                       \
    step(x11);                       \
  }

// N chains of x = x + a * b over vectors V, b made opaque before every step; the chains' sum.
template <typename V, int N>
V mul_add_chains(V a, V b, int64_t iters) {
  static_assert(N == 8 || N == 12);
  QUANTKV_OPAQUE(a);  // or the compiler folds a multiply by 1 away
  V x0{}, x1{}, x2{}, x3{}, x4{}, x5{}, x6{}, x7{}, x8{}, x9{}, x10{}, x11{};
#define QUANTKV_MUL_ADD_STEP(x) \
  QUANTKV_OPAQUE(b);            \
  x = x + a * b;                \
  QUANTKV_OPAQUE(x)
  for (int64_t i = 0; i < iters; ++i) {
    QUANTKV_CEILING_CHAINS(QUANTKV_MUL_ADD_STEP)
  }
#undef QUANTKV_MUL_ADD_STEP
  return ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) + ((x8 + x9) + (x10 + x11));
}

template <int N>
int64_t f32_loop(int64_t iters, float* sink) {
  const F32x4 a = {1.0f, 1.0f, 1.0f, 1.0f}, b = {1e-6f, 1e-6f, 1e-6f, 1e-6f};
  *sink += mul_add_chains<F32x4, N>(a, b, iters)[0];
  return iters * N * 4;  // 4 multiply-adds per step
}

template <int N>
int64_t int16_loop(int64_t iters, int32_t* sink) {
  const U16x8 ones = {1, 1, 1, 1, 1, 1, 1, 1};
  // The lanes wrap (they only count).
  *sink = int32_t(uint32_t(*sink) + uint16_t(mul_add_chains<U16x8, N>(ones, ones, iters)[0]));
  return iters * N * 8;  // 8 multiply-adds per step
}

#undef QUANTKV_CEILING_CHAINS
#undef QUANTKV_OPAQUE

}  // namespace

int64_t f32_mul_add_loop_generic(int accumulators, int64_t iters, float* sink) {
  return accumulators == 8 ? f32_loop<8>(iters, sink) : f32_loop<12>(iters, sink);
}

int64_t int16_mul_add_loop_generic(int accumulators, int64_t iters, int32_t* sink) {
  return accumulators == 8 ? int16_loop<8>(iters, sink) : int16_loop<12>(iters, sink);
}

// Four independent xor chains of 16-byte vectors.
uint64_t read_stream_generic(const uint64_t* data, int64_t words) {
  typedef uint64_t U64x2 __attribute__((vector_size(16)));
  U64x2 s0{}, s1{}, s2{}, s3{};
  int64_t i = 0;
  for (; i + 8 <= words; i += 8) {
    U64x2 v[4];
    std::memcpy(v, data + i, sizeof v);
    s0 ^= v[0];
    s1 ^= v[1];
    s2 ^= v[2];
    s3 ^= v[3];
  }
  const U64x2 s = (s0 ^ s1) ^ (s2 ^ s3);
  uint64_t sum = s[0] ^ s[1];
  for (; i < words; ++i) sum ^= data[i];
  return sum;
}

}  // namespace quantkv::ceilings
