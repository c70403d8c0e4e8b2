// NEON peak-rate loops (aarch64 baseline): f32 FMLA (the indexer's ceiling without BF16) and
// SMULL + SADALP (the FP4 GEMM's int8 products without dotprod).
#include <arm_neon.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {

int64_t f32_fma_loop_neon(int64_t iters, float* sink) {
  const float32x4_t a = vdupq_n_f32(1.0f), b = vdupq_n_f32(1e-6f);
  float32x4_t acc[16];
  for (auto& x : acc) x = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& x : acc) {
      x = vfmaq_f32(x, a, b);
      __asm__ volatile("" : "+w"(x));
    }
  }
  float32x4_t sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = vaddq_f32(sum, acc[k]);
  *sink += vgetq_lane_f32(sum, 0);
  return iters * 16 * 4;
}

int64_t int8_dot_loop_neon(int64_t iters, int32_t* sink) {
  const int8x16_t a = vdupq_n_s8(1);
  int8x16_t b = vdupq_n_s8(1);
  int32x4_t acc[8];
  for (auto& x : acc) x = vdupq_n_s32(0);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+w"(b));  // the products must not be hoisted out of the loop
    for (auto& x : acc) {  // 16 multiply-adds: the FP4 kernel's SMULL, SMULL2, ADDP, SADALP
      x = vpadalq_s16(x, vpaddq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)), vmull_high_s8(a, b)));
      __asm__ volatile("" : "+w"(x));
    }
  }
  int32x4_t sum = acc[0];
  for (int k = 1; k < 8; ++k) sum = vaddq_s32(sum, acc[k]);
  *sink = int32_t(uint32_t(*sink) + uint32_t(vgetq_lane_s32(sum, 0)));  // wraps, as the lanes do
  return iters * 8 * 16;
}

}  // namespace quantkv::ceilings
