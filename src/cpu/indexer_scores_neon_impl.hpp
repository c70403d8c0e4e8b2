// Internal: the NEON score kernels' shared body, instantiated by indexer_scores_neon.cpp (f32
// FMLA, every aarch64 CPU) and indexer_scores_neon_bf16.cpp (BFMLALT/BFMLALB, ARMv8.6 BF16).
// Everything here has internal linkage, so each file keeps its own copy compiled with its own
// flags (no BF16 instruction can reach the baseline path through a shared inline symbol).
//
// The AVX2 kernel's scheme on 128-bit vectors: the tile's K is repacked once in key vectors of
// 4 keys, q is broadcast per element (f32) or per pair (bf16). A register block is 16 keys
// (4 vectors) x 4 heads: 16 accumulators of the 32 vector registers. Each step rounds once,
// the odd element of each pair first, so the scores equal the scalar kernel's bit for bit
// (indexer_kernels.hpp, "canonical order").
#pragma once

#include <arm_neon.h>

#include "cpu/indexer_kernels.hpp"
#include "cpu/indexer_mxfp4.hpp"
#include "cpu/static_count.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kNeonLanes = 4;
constexpr int kNeonVecs = 4;  // key vectors of 4 per register block
constexpr int kNeonHeadGroup = 4;
constexpr int kNeonSubBlock = kNeonLanes * kNeonVecs;

// Keys [4g, 4g + 4) -> key vector g of `packed` (Panel::index gives the place of (d, key));
// missing keys are zeros. `rows` stages the 4 converted rows.
template <typename Panel>
void pack_key_vector(const IndexerTile& t, int g, typename Panel::Elem* rows,
                     typename Panel::Elem* packed) {
  const int D = t.head_dim;
  for (int r = 0; r < kNeonLanes; ++r) {
    const int key = kNeonLanes * g + r;
    if (key < t.num_keys && t.k_block_scales != nullptr) {
      decode_fp4_key(t.k_nvfp4, t.k_rows[key], t.k_block_scales[key], D, rows + r * D);
    } else if (key < t.num_keys) {
      Panel::convert_row(t.k_rows[key], rows + r * D, D);
    } else {
      for (int d = 0; d < D; ++d) rows[r * D + d] = 0;
    }
  }
  typename Panel::Elem* out = packed + std::size_t(g) * D * kNeonLanes;
  for (int d = 0; d < D; ++d) {
    for (int r = 0; r < kNeonLanes; ++r) out[Panel::index(d, r)] = rows[r * D + d];
  }
}

template <typename Panel, int NH>
inline void head_group(const typename Panel::Elem* kblock, std::size_t vec_stride,
                       const typename Panel::Elem* q, int D, const float* w,
                       float32x4_t sacc[kNeonVecs]) {
  float32x4_t acc[NH][kNeonVecs];
  for (int h = 0; h < NH; ++h)
    for (int v = 0; v < kNeonVecs; ++v) acc[h][v] = vdupq_n_f32(0.0f);
  for (int p = 0; p < D / 2; ++p) Panel::template pair_step<NH>(kblock, vec_stride, q, D, p, acc);
  const float32x4_t zero = vdupq_n_f32(0.0f);
  for (int h = 0; h < NH; ++h) {
    for (int v = 0; v < kNeonVecs; ++v) {
      // max(0, NaN) stays NaN, as the scalar `0 > dot ? 0 : dot` (FMAX propagates NaN).
      sacc[v] = vfmaq_n_f32(sacc[v], vmaxq_f32(zero, acc[h][v]), w[h]);
    }
  }
}

template <typename Panel>
void score_sub_block(const IndexerTile& t, const typename Panel::Elem* kblock,
                     std::size_t vec_stride, const typename Panel::Elem* q, const float* w,
                     const float* kscale, float* out) {
  const int H = t.num_heads, D = t.head_dim;
  float32x4_t sacc[kNeonVecs];
  for (int v = 0; v < kNeonVecs; ++v) sacc[v] = vdupq_n_f32(0.0f);
  for_each_static_group<kNeonHeadGroup>(H, [&](int h, auto nh) {
    head_group<Panel, nh>(kblock, vec_stride, q + std::size_t(h) * D, D, w + h, sacc);
  });
  for (int v = 0; v < kNeonVecs; ++v) {
    vst1q_f32(out + kNeonLanes * v, vmulq_f32(sacc[v], vld1q_f32(kscale + kNeonLanes * v)));
  }
}

template <typename Panel>
void score_tile_neon(const IndexerTile& t, void* scratch) {
  using Elem = typename Panel::Elem;
  const int D = t.head_dim, H = t.num_heads;
  // Scratch: packed K [kIndexerKeyTile / 4][D][4] elements, then q of one token [H][D] (which
  // also stages 4 key rows while packing).
  Elem* packed = static_cast<Elem*>(scratch);
  Elem* q = packed + indexer_tile_k_bytes(D) / sizeof(Elem);
  float kscale[kIndexerKeyTile];

  const int num_sub = (t.num_keys + kNeonSubBlock - 1) / kNeonSubBlock;
  for (int g = 0; g < num_sub * kNeonVecs; ++g) pack_key_vector<Panel>(t, g, q, packed);
  for (int c = 0; c < num_sub * kNeonSubBlock; ++c)
    kscale[c] = c < t.num_keys ? t.k_scales[c] : 0.0f;

  const std::size_t vec_stride = std::size_t(D) * kNeonLanes;
  for (int tok = 0; tok < t.num_tokens; ++tok) {
    const int subs = (tile_key_limit(t, tok) + kNeonSubBlock - 1) / kNeonSubBlock;
    Panel::stage_q(t.q_bf16 + std::size_t(tok) * H * D, H * D, q);
    const float* w = t.q_s + std::size_t(tok) * H;
    float* row = t.scores + t.row_offsets[tok];
    for (int sb = 0; sb < subs; ++sb) {
      score_sub_block<Panel>(t, packed + sb * kNeonVecs * vec_stride, vec_stride, q, w,
                             kscale + sb * kNeonSubBlock, row + sb * kNeonSubBlock);
    }
  }
}

}  // namespace
}  // namespace quantkv::cpu
