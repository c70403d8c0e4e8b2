// Internal: the NEON pair kernels' shared body for NVFP4 / MXFP4, instantiated by
// qkv_fp4_neon.cpp (SMULL + pairwise adds, every aarch64 CPU) and qkv_fp4_neon_dotprod.cpp
// (SDOT, ARMv8.2 dotprod). Internal linkage throughout, so each file keeps its own copy compiled
// with its own flags.
//
// The panel is the AVX kernels' ([kb][half][G groups][64 bytes], byte 4 * lane + i of a group
// is column lane's code k = 4g + i, biased to [0, 24]). The biased codes fit a signed byte, so
// signed x signed products of panel and activation bytes plus the block's correction are the
// exact integer block dot products; the fp32 steps are the canonical order's (qkv_kernels.hpp).
#pragma once

#include "cpu/qkv_neon_common.hpp"

namespace quantkv::cpu {
namespace {

// Prepared chunks -> the decoded panel (TBL on the 16-entry code table).
inline void decode_fp4_panel_neon(const uint8_t* prepared, int64_t chunks, uint8_t* panel) {
  const uint8x16_t table = vld1q_u8(kBiasedDoubledE2M1);
  const uint8x16_t nib = vdupq_n_u8(0x0F);
  for (int64_t j = 0; j < chunks * 4; ++j) {  // 16-byte quarters of the 64-byte chunks
    const uint8x16_t v = vld1q_u8(prepared + j * 16);
    uint8_t* dst = panel + (j / 4) * 128 + (j % 4) * 16;
    vst1q_u8(dst, vqtbl1q_u8(table, vandq_u8(v, nib)));
    vst1q_u8(dst + 64, vqtbl1q_u8(table, vshrq_n_u8(v, 4)));
  }
}

// Rows [m0, m0 + R) x the 16 columns of `half`; G = SFV / 4. Dot::add(acc, w, a) adds, per
// int32 lane, the 4 byte products of one column.
template <typename Dot, int R, int G>
void fp4_half_tile_neon(const QkvProblem& p, const uint8_t* panel, const uint16_t* wscale,
                        int64_t m0, int half, float* tile) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const int8_t* w = reinterpret_cast<const int8_t*>(panel + (kb * 2 + half) * G * 64);
    int32x4_t blk[R][4];
    for (int r = 0; r < R; ++r) {
      const int32x4_t corr = vdupq_n_s32(p.a.corr[act_block_index(p, m0 + r, kb)]);
      for (int v = 0; v < 4; ++v) blk[r][v] = corr;
    }
    for (int g = 0; g < G; ++g) {
      int8x16_t wv[4];
      for (int v = 0; v < 4; ++v) wv[v] = vld1q_s8(w + g * 64 + v * 16);
      for (int r = 0; r < R; ++r) {
        const int8x16_t a =
            vreinterpretq_s8_u32(vdupq_n_u32(p.a.units[act_unit_index(p, m0 + r, kb, g)]));
        for (int v = 0; v < 4; ++v) blk[r][v] = Dot::add(blk[r][v], wv[v], a);
      }
    }
    const uint16_t* sbp = wscale + (kb * 2 + half) * kHalfCols;
    for (int r = 0; r < R; ++r) {
      const float sa = p.a.scale[act_block_index(p, m0 + r, kb)];
      for (int v = 0; v < 4; ++v) {
        const float32x4_t s = vmulq_n_f32(neon_bf16x4_to_f32(sbp + 4 * v), sa);  // fl(sa' * sb)
        acc[r][v] = vfmaq_f32(acc[r][v], vcvtq_f32_s32(blk[r][v]), s);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      vst1q_f32(tile + r * kPairCols + half * kHalfCols + 4 * v, acc[r][v]);
}

template <typename Dot, int G>
void fp4_pair_neon(const QkvProblem& p, int64_t pair, const uint8_t* panel) {
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  for_each_neon_row_tile(p, pair, [&]<int R>(int64_t m0, int half, float* tile) {
    fp4_half_tile_neon<Dot, R, G>(p, panel, wscale, m0, half, tile);
  });
}

template <typename Dot>
void qkv_fp4_pair_neon_with(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  decode_fp4_panel_neon(prepared_pair_data(p, pair), p.k * kPairCols / 128, panel);
  if (p.sfv == 16) {
    fp4_pair_neon<Dot, 4>(p, pair, panel);
  } else {
    fp4_pair_neon<Dot, 8>(p, pair, panel);
  }
}

}  // namespace
}  // namespace quantkv::cpu
