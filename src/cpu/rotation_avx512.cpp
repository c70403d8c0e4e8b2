// AVX-512 rows of the shared rotations: the scalar rows' operations on 16 lanes (see
// rotation_kernels.hpp); tails run the scalar steps.
#include <immintrin.h>

#include "cpu/rotation_rows.hpp"

namespace quantkv::cpu {
namespace {

// Butterfly stage h (< 16) inside one vector: lanes with bit h clear get self + partner, the
// others partner - self (the scalar (a, b) -> (a + b, a - b) with a the lower lane).
__m512 butterfly_in_register(__m512 v, int h, __mmask16 upper) {
  const __m512i partner =
      _mm512_xor_si512(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                       _mm512_set1_epi32(h));
  const __m512 p = _mm512_permutexvar_ps(partner, v);
  return _mm512_mask_sub_ps(_mm512_add_ps(v, p), upper, p, v);
}

// The lane set of rotation_rows.hpp's drivers.
struct Avx512Lanes {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  // Stages h = 1, 2, 4, 8 inside one vector.
  static Vec butterflies(Vec v) {
    v = butterfly_in_register(v, 1, 0xAAAA);
    v = butterfly_in_register(v, 2, 0xCCCC);
    v = butterfly_in_register(v, 4, 0xF0F0);
    return butterfly_in_register(v, 8, 0xFF00);
  }
  // 8 interleaved pairs: even lanes a*c - b*s, odd lanes a*s + b*c (as rope_pair).
  static void rope_interleaved(float* x, const float* cs) {
    const __m512 v = _mm512_loadu_ps(x), c = _mm512_loadu_ps(cs);
    const __m512 p = _mm512_mul_ps(v, _mm512_moveldup_ps(c));                           // a*c | b*c
    const __m512 q = _mm512_mul_ps(_mm512_permute_ps(v, 0xB1), _mm512_movehdup_ps(c));  // b*s | a*s
    _mm512_storeu_ps(x, _mm512_mask_add_ps(_mm512_sub_ps(p, q), 0xAAAA, q, p));
  }
  // 16 half-split pairs (x[i], x[i + half]) with cos/sin de-interleaved from 32 table entries.
  static void rope_half(float* a_ptr, float* b_ptr, const float* cs) {
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512 lo = _mm512_loadu_ps(cs), hi = _mm512_loadu_ps(cs + 16);
    const __m512 c = _mm512_permutex2var_ps(lo, even, hi), s = _mm512_permutex2var_ps(lo, odd, hi);
    const __m512 a = _mm512_loadu_ps(a_ptr), b = _mm512_loadu_ps(b_ptr);
    _mm512_storeu_ps(a_ptr, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
    _mm512_storeu_ps(b_ptr, _mm512_add_ps(_mm512_mul_ps(a, s), _mm512_mul_ps(b, c)));
  }
};

}  // namespace

// float_to_bf16 and back on 16 lanes: round to nearest even in the integer domain, NaN -> 0x7FFF.
void round_bf16_row_avx512(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    r = _mm512_and_si512(r, _mm512_set1_epi32(int(0xFFFF0000u)));
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000)),
                              _mm512_set1_epi32(0x7FFF0000));
    _mm512_mask_storeu_ps(x + i, m, _mm512_castsi512_ps(r));
  }
}

void rope_row_avx512(float* x, const float* cs, int64_t rope_dim, RopeLayout layout) {
  rope_row_lanes<Avx512Lanes>(x, cs, rope_dim, layout);
}

void hadamard_row_avx512(float* x, int64_t n, float scale) {
  hadamard_row_lanes<Avx512Lanes>(x, n, scale);
}

}  // namespace quantkv::cpu
