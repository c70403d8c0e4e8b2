// ARMv8.6 BF16 score kernel (compiled with +bf16): K repacked to bf16 pairs (e4m3 is exact in
// bf16) as [key vector][D/2][4 keys][2], q broadcast per pair; BFMLALT then BFMLALB add the
// odd then the even product of each pair into f32 lanes, each a fused multiply-add rounding
// once: exactly the canonical order. BFDOT is not used: it adds the two products to each other
// first, with round-to-odd, so its bits differ from the canonical order's.
#include <cstring>

#include "cpu/convert_kernels.hpp"
#include "cpu/indexer_scores_neon_impl.hpp"

namespace quantkv::cpu {
namespace {

struct Bf16Panel {
  using Elem = uint16_t;
  static void convert_row(const uint8_t* e4m3, uint16_t* dst, int n) {
    convert_e4m3_to_bf16_scalar(e4m3, dst, n);
  }
  static int index(int d, int key) { return ((d / 2) * kNeonLanes + key) * 2 + d % 2; }
  static void stage_q(const uint16_t* q16, int n, uint16_t* q) {
    for (int i = 0; i < n; ++i) q[i] = q16[i];
  }
  template <int NH>
  static void pair_step(const uint16_t* kblock, std::size_t vec_stride, const uint16_t* q, int D,
                        int p, float32x4_t acc[NH][kNeonVecs]) {
    bfloat16x8_t kv[kNeonVecs];
    for (int v = 0; v < kNeonVecs; ++v) {
      kv[v] = vreinterpretq_bf16_u16(vld1q_u16(kblock + v * vec_stride + p * 2 * kNeonLanes));
    }
    for (int h = 0; h < NH; ++h) {
      uint32_t pair;  // q[h][2p] in the low half (the even, "bottom" element)
      std::memcpy(&pair, q + h * D + 2 * p, 4);
      const bfloat16x8_t qp = vreinterpretq_bf16_u32(vdupq_n_u32(pair));
      for (int v = 0; v < kNeonVecs; ++v) {
        acc[h][v] = vbfmlalbq_f32(vbfmlaltq_f32(acc[h][v], qp, kv[v]), qp, kv[v]);
      }
    }
  }
};

}  // namespace

void indexer_score_tile_neon_bf16(const IndexerTile& t, void* scratch) {
  score_tile_neon<Bf16Panel>(t, scratch);
}

}  // namespace quantkv::cpu
