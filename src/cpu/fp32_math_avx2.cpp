// AVX2 elementwise fp32 math: fp32_math_impl.hpp on 8 lanes.
#include <immintrin.h>

#include "cpu/fp32_math_impl.hpp"
#include "cpu/fp32_math_kernels.hpp"

namespace quantkv::cpu {
namespace {

struct Avx2Lanes {
  using Vec = __m256;
  static constexpr int64_t kLanes = 8;
  static Vec set1(float x) { return _mm256_set1_ps(x); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static Vec neg(Vec a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static Vec pow2_minus1(Vec n) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(126)), 23));
  }
  static Vec if_gt(Vec a, Vec b, Vec x, Vec y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ));
  }
  static Vec if_lt(Vec a, Vec b, Vec x, Vec y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
  }
  static Vec if_nan(Vec a, Vec x, Vec y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};

}  // namespace

void moe_activation_span_avx2(MoeActivation act, const float* gate, const float* up, int64_t n,
                              float alpha, float limit, float* h) {
  moe_activation_span_lanes<Avx2Lanes>(act, gate, up, n, alpha, limit, h);
}

void exp_diff_avx2(const float* s, const float* m, int64_t n, float* p) {
  exp_diff_lanes<Avx2Lanes>(s, m, n, p);
}

}  // namespace quantkv::cpu
