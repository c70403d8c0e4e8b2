// ARMv8.6 BF16 peak-rate loop (compiled with +bf16): BFMLALB + BFMLALT, the indexer kernel's
// pair step, 4 bf16 multiply-adds each.
#include <arm_neon.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {

int64_t bf16_dot_loop_neon_bf16(int64_t iters, float* sink) {
  // bf16 1.0 and ~1e-6, hidden from the optimiser: GCC 12 otherwise materialises the constant
  // with an fp16 FMOV immediate, which +bf16 alone does not allow.
  uint16x8_t a16 = vdupq_n_u16(0x3F80), b16 = vdupq_n_u16(0x3586);
  __asm__("" : "+w"(a16), "+w"(b16));
  const bfloat16x8_t a = vreinterpretq_bf16_u16(a16);
  bfloat16x8_t b = vreinterpretq_bf16_u16(b16);
  float32x4_t acc[16];
  for (auto& x : acc) x = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+w"(b));
    for (auto& x : acc) {
      x = vbfmlalbq_f32(vbfmlaltq_f32(x, a, b), a, b);
      __asm__ volatile("" : "+w"(x));
    }
  }
  float32x4_t sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = vaddq_f32(sum, acc[k]);
  *sink += vgetq_lane_f32(sum, 0);
  return iters * 16 * 8;
}

}  // namespace quantkv::ceilings
