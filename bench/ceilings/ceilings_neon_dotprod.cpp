// ARMv8.2 dotprod peak-rate loop (compiled with +dotprod): SDOT, 16 int8 multiply-adds each.
#include <arm_neon.h>

#include "ceilings/ceilings_kernels.hpp"

namespace quantkv::ceilings {

int64_t int8_dot_loop_neon_dotprod(int64_t iters, int32_t* sink) {
  const int8x16_t a = vdupq_n_s8(1);
  int8x16_t b = vdupq_n_s8(1);
  int32x4_t acc[16];
  for (auto& x : acc) x = vdupq_n_s32(0);
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("" : "+w"(b));
    for (auto& x : acc) {
      x = vdotq_s32(x, a, b);
      __asm__ volatile("" : "+w"(x));
    }
  }
  int32x4_t sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = vaddq_s32(sum, acc[k]);
  *sink = int32_t(uint32_t(*sink) + uint32_t(vgetq_lane_s32(sum, 0)));  // wraps, as the lanes do
  return iters * 16 * 16;
}

}  // namespace quantkv::ceilings
