// NEON score kernel (aarch64 baseline): K repacked to f32 (exact) as [key vector][D][4 keys],
// q broadcast per element, FMLA per element with the odd element of each pair first
// (indexer_scores_neon_impl.hpp has the register blocking).
#include "cpu/convert_kernels.hpp"
#include "cpu/indexer_scores_neon_impl.hpp"

namespace quantkv::cpu {
namespace {

struct F32Panel {
  using Elem = float;
  static void convert_row(const uint8_t* e4m3, float* dst, int n) {
    convert_e4m3_to_f32_scalar(e4m3, dst, n);
  }
  static int index(int d, int key) { return d * kNeonLanes + key; }
  static void stage_q(const uint16_t* q16, int n, float* q) {
    for (int i = 0; i < n; ++i) q[i] = bf16_to_float(q16[i]);
  }
  // acc[h][v] += q[h][2p+1] * k[2p+1], then q[h][2p] * k[2p], each FMLA rounding once.
  template <int NH>
  static void pair_step(const float* kblock, std::size_t vec_stride, const float* q, int D, int p,
                        float32x4_t acc[NH][kNeonVecs]) {
    for (int e = 1; e >= 0; --e) {
      const int d = 2 * p + e;
      float32x4_t kv[kNeonVecs];
      for (int v = 0; v < kNeonVecs; ++v)
        kv[v] = vld1q_f32(kblock + v * vec_stride + d * kNeonLanes);
      for (int h = 0; h < NH; ++h) {
        const float qd = q[h * D + d];
        for (int v = 0; v < kNeonVecs; ++v) acc[h][v] = vfmaq_n_f32(acc[h][v], kv[v], qd);
      }
    }
  }
};

}  // namespace

void indexer_score_tile_neon(const IndexerTile& t, void* scratch) {
  score_tile_neon<F32Panel>(t, scratch);
}

}  // namespace quantkv::cpu
