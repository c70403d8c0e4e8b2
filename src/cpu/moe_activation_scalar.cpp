// The scalar fused-experts activation span (moe_activation_kernels.hpp): the reference the
// vector variants replay, and every level without one (the aarch64 levels).
#include "cpu/moe_activation_kernels.hpp"

namespace quantkv::cpu {

void moe_activation_span_scalar(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h) {
  for (int64_t i = 0; i < n; ++i) h[i] = moe_activation(act, gate[i], up[i], alpha, limit);
}

}  // namespace quantkv::cpu
