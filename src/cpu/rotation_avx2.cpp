// AVX2 rows of the shared rotations: the scalar rows' operations on 8 lanes (see
// rotation_kernels.hpp); tails run the scalar steps.
#include <immintrin.h>

#include "cpu/rotation_rows.hpp"

namespace quantkv::cpu {
namespace {

// Butterfly stage inside one vector, partner already permuted: lanes in `upper` (bit h set)
// get partner - self, the others self + partner.
template <int kUpper>
__m256 butterfly_in_register(__m256 v, __m256 p) {
  return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), kUpper);
}

// The lane set of rotation_rows.hpp's drivers.
struct Avx2Lanes {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  // Stages h = 1, 2, 4 inside one vector.
  static Vec butterflies(Vec v) {
    v = butterfly_in_register<0xAA>(v, _mm256_permute_ps(v, 0xB1));
    v = butterfly_in_register<0xCC>(v, _mm256_permute_ps(v, 0x4E));
    return butterfly_in_register<0xF0>(v, _mm256_permute2f128_ps(v, v, 1));
  }
  // 4 interleaved pairs: even lanes a*c - b*s, odd lanes a*s + b*c (as rope_pair).
  static void rope_interleaved(float* x, const float* cs) {
    const __m256 v = _mm256_loadu_ps(x), c = _mm256_loadu_ps(cs);
    const __m256 p = _mm256_mul_ps(v, _mm256_moveldup_ps(c));                           // a*c | b*c
    const __m256 q = _mm256_mul_ps(_mm256_permute_ps(v, 0xB1), _mm256_movehdup_ps(c));  // b*s | a*s
    _mm256_storeu_ps(x, _mm256_blend_ps(_mm256_sub_ps(p, q), _mm256_add_ps(q, p), 0xAA));
  }
  // 8 half-split pairs with cos/sin de-interleaved from 16 table entries.
  static void rope_half(float* a_ptr, float* b_ptr, const float* cs) {
    const __m256 lo = _mm256_loadu_ps(cs), hi = _mm256_loadu_ps(cs + 8);
    // shuffle_ps picks within 128-bit halves (c0 c1 c4 c5 | c2 c3 c6 c7); permute4x64 restores
    // order.
    const __m256 c = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                              _MM_SHUFFLE(3, 1, 2, 0)));
    const __m256 s = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))),
                              _MM_SHUFFLE(3, 1, 2, 0)));
    const __m256 a = _mm256_loadu_ps(a_ptr), b = _mm256_loadu_ps(b_ptr);
    _mm256_storeu_ps(a_ptr, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
    _mm256_storeu_ps(b_ptr, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
  }
};

}  // namespace

// float_to_bf16 and back on 8 lanes: round to nearest even in the integer domain, NaN -> 0x7FFF.
void round_bf16_row_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
    r = _mm256_and_si256(r, _mm256_set1_epi32(int(0xFFFF0000u)));
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FFF0000), nan);
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(r));
  }
  round_bf16_row_scalar(x + i, n - i);
}

void rope_row_avx2(float* x, const float* cs, int64_t rope_dim, RopeLayout layout) {
  rope_row_lanes<Avx2Lanes>(x, cs, rope_dim, layout);
}

void hadamard_row_avx2(float* x, int64_t n, float scale) {
  hadamard_row_lanes<Avx2Lanes>(x, n, scale);
}

}  // namespace quantkv::cpu
