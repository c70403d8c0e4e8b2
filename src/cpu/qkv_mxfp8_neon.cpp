// NEON pair kernel of the fused QKV projection for MXFP8 (aarch64 baseline): each bf16 pair of
// the panel is split into its odd and even halves (exact fp32) and FMLA adds the odd, then the
// even product (qkv_mxfp8_neon_impl.hpp has the register tiles).
#include "cpu/qkv_mxfp8_neon_impl.hpp"

namespace quantkv::cpu {
namespace {

struct FmlaStep {
  static float32x4_t add(float32x4_t t, uint32_t unit, uint16x8_t w) {
    const uint32x4_t w32 = vreinterpretq_u32_u16(w);
    const float32x4_t w_odd = vreinterpretq_f32_u32(vandq_u32(w32, vdupq_n_u32(0xFFFF0000u)));
    const float32x4_t w_even = vreinterpretq_f32_u32(vshlq_n_u32(w32, 16));
    t = vfmaq_n_f32(t, w_odd, bf16_bits_to_float(uint16_t(unit >> 16)));
    return vfmaq_n_f32(t, w_even, bf16_bits_to_float(uint16_t(unit)));
  }
};

}  // namespace

void qkv_mxfp8_pair_neon(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  qkv_mxfp8_pair_neon_with<FmlaStep>(p, pair, panel);
}

void qkv_fp4_bf16_pair_neon(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  qkv_fp4_bf16_pair_neon_with<FmlaStep>(p, pair, panel);
}

}  // namespace quantkv::cpu
