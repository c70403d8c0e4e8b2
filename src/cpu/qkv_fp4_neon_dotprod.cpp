// ARMv8.2 dotprod pair kernel of the fused QKV projection for NVFP4 / MXFP4 (compiled with
// +dotprod): one SDOT adds the 4 byte products of each of 4 columns to their int32 lanes.
// qkv_fp4_neon_impl.hpp has the register tiles.
#include "cpu/qkv_fp4_neon_impl.hpp"

namespace quantkv::cpu {
namespace {

struct SdotDot {
  static int32x4_t add(int32x4_t acc, int8x16_t w, int8x16_t a) { return vdotq_s32(acc, w, a); }
};

}  // namespace

void qkv_fp4_pair_neon_dotprod(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  qkv_fp4_pair_neon_with<SdotDot>(p, pair, panel);
}

}  // namespace quantkv::cpu
