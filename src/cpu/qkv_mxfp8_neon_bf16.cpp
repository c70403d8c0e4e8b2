// ARMv8.6 BF16 pair kernel of the fused QKV projection for MXFP8 (compiled with +bf16): the
// row's bf16 pair is broadcast to every 32-bit lane, BFMLALT adds the odd and BFMLALB the even
// product into fp32 lanes, each fused (qkv_mxfp8_neon_impl.hpp has the register tiles). BFDOT
// would add the two products to each other first, with round-to-odd: not the canonical order.
#include "cpu/qkv_mxfp8_neon_impl.hpp"

namespace quantkv::cpu {
namespace {

struct BfmlalStep {
  static float32x4_t add(float32x4_t t, uint32_t unit, uint16x8_t w) {
    const bfloat16x8_t a = vreinterpretq_bf16_u32(vdupq_n_u32(unit));
    const bfloat16x8_t wb = vreinterpretq_bf16_u16(w);
    return vbfmlalbq_f32(vbfmlaltq_f32(t, a, wb), a, wb);
  }
};

}  // namespace

void qkv_mxfp8_pair_neon_bf16(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  qkv_mxfp8_pair_neon_with<BfmlalStep>(p, pair, panel);
}

void qkv_fp4_bf16_pair_neon_bf16(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  qkv_fp4_bf16_pair_neon_with<BfmlalStep>(p, pair, panel);
}

}  // namespace quantkv::cpu
