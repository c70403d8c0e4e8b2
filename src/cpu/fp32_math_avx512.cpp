// AVX-512 elementwise fp32 math: fp32_math_impl.hpp on 16 lanes.
#include <immintrin.h>

#include "cpu/fp32_math_impl.hpp"
#include "cpu/fp32_math_kernels.hpp"

namespace quantkv::cpu {
namespace {

struct Avx512Lanes {
  using Vec = __m512;
  static constexpr int64_t kLanes = 16;
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static Vec neg(Vec a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); }
  static Vec pow2_minus1(Vec n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(126)), 23));
  }
  static Vec if_gt(Vec a, Vec b, Vec x, Vec y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x);
  }
  static Vec if_lt(Vec a, Vec b, Vec x, Vec y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
  }
  static Vec if_nan(Vec a, Vec x, Vec y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), y, x);
  }
};

}  // namespace

void moe_activation_span_avx512(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h) {
  moe_activation_span_lanes<Avx512Lanes>(act, gate, up, n, alpha, limit, h);
}

void exp_diff_avx512(const float* s, const float* m, int64_t n, float* p) {
  exp_diff_lanes<Avx512Lanes>(s, m, n, p);
}

}  // namespace quantkv::cpu
