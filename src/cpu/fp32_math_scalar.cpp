// The scalar elementwise fp32 math (fp32_math_kernels.hpp): the reference the vector variants
// replay, and every level without one (the aarch64 levels).
#include "cpu/fp32_math_kernels.hpp"

namespace quantkv::cpu {

void moe_activation_span_scalar(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h) {
  for (int64_t i = 0; i < n; ++i) h[i] = moe_activation(act, gate[i], up[i], alpha, limit);
}

void exp_diff_scalar(const float* s, const float* m, int64_t n, float* p) {
  for (int64_t i = 0; i < n; ++i) p[i] = detail::exp_f32(s[i] - m[i]);
}

}  // namespace quantkv::cpu
