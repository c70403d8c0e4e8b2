// NEON pair kernel of the fused QKV projection for NVFP4 / MXFP4 (aarch64 baseline): SMULL
// products of panel and activation bytes (|product| <= 288), pairwise-added twice to int32
// (|sum of two| <= 576 fits int16). qkv_fp4_neon_impl.hpp has the register tiles.
#include "cpu/qkv_fp4_neon_impl.hpp"

namespace quantkv::cpu {
namespace {

struct SmullDot {
  // Lane c of acc += sum over i < 4 of w[4c + i] * a[4c + i].
  static int32x4_t add(int32x4_t acc, int8x16_t w, int8x16_t a) {
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));  // columns 0, 1
    const int16x8_t hi = vmull_high_s8(w, a);                       // columns 2, 3
    return vpadalq_s16(acc, vpaddq_s16(lo, hi));
  }
};

}  // namespace

void qkv_fp4_pair_neon(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  qkv_fp4_pair_neon_with<SmullDot>(p, pair, panel);
}

}  // namespace quantkv::cpu
