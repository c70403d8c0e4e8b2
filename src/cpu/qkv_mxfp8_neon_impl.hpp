// Internal: the NEON pair kernels' shared body for MXFP8 and the weight-only fp4 weight (bf16
// activations), instantiated by qkv_mxfp8_neon.cpp (FMLA on the split halves of each bf16 pair,
// every aarch64 CPU) and qkv_mxfp8_neon_bf16.cpp (BFMLALT then BFMLALB, ARMv8.6 BF16). Internal
// linkage throughout, so each file keeps its own copy compiled with its own flags.
//
// Both replay the AVX2 kernel's order, t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p], each step a
// fused multiply-add rounding once; the products of bf16 activations and e4m3 weights are exact,
// so each step rounds exactly like the canonical add (qkv_kernels.hpp).
#pragma once

#include "cpu/convert_kernels.hpp"
#include "cpu/qkv_neon_common.hpp"

namespace quantkv::cpu {
namespace {

// Rows [m0, m0 + R) x the 16 columns of `half`. The panel is [kb][half][P pairs][16 columns][2]
// bf16 (P = 16 for MXFP8 and a weight-only MXFP4 weight, 8 for a weight-only NVFP4 one);
// Step::add(t, unit, w) adds a row's pair `unit` (bf16 of k = 2p in the low half) times 4
// columns' pairs `w` (8 bf16) to their lanes, odd product first.
template <typename Step, int R, int P>
void bf16_half_tile_neon(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale,
                         int64_t m0, int half, float* tile) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint16_t* w = panel + (kb * 2 + half) * P * 32;
    float32x4_t t[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) t[r][v] = vdupq_n_f32(0.0f);
    for (int pv = 0; pv < P; ++pv) {
      uint16x8_t wv[4];
      for (int v = 0; v < 4; ++v) wv[v] = vld1q_u16(w + pv * 32 + v * 8);
      for (int r = 0; r < R; ++r) {
        const uint32_t unit = p.a.units[act_unit_index(p, m0 + r, kb, pv)];
        for (int v = 0; v < 4; ++v) t[r][v] = Step::add(t[r][v], unit, wv[v]);
      }
    }
    const uint16_t* sbp = wscale + (kb * 2 + half) * kHalfCols;
    for (int r = 0; r < R; ++r) {
      const float sa = p.a.scale[act_block_index(p, m0 + r, kb)];
      for (int v = 0; v < 4; ++v) {
        const float32x4_t s = vmulq_n_f32(neon_bf16x4_to_f32(sbp + 4 * v), sa);  // fl(sa' * sb)
        acc[r][v] = vfmaq_f32(acc[r][v], t[r][v], s);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      vst1q_f32(tile + r * kPairCols + half * kHalfCols + 4 * v, acc[r][v]);
}

// The row tiles of a pair over its bf16 panel, P pairs per scale block.
template <typename Step, int P>
void bf16_panel_tiles_neon(const QkvProblem& p, int64_t pair, const uint16_t* bf16_panel) {
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  for_each_neon_row_tile(p, pair, [&]<int R>(int64_t m0, int half, float* tile) {
    bf16_half_tile_neon<Step, R, P>(p, bf16_panel, wscale, m0, half, tile);
  });
}

template <typename Step>
void qkv_mxfp8_pair_neon_with(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  convert_e4m3_to_bf16_scalar(prepared_pair_data(p, pair), bf16_panel, p.k * kPairCols);
  bf16_panel_tiles_neon<Step, 16>(p, pair, bf16_panel);
}

// decode_fp4_bf16_panel_scalar with TBL: LD4 splits a 64-byte chunk into the 16 lanes' bytes
// b0..b3, each nibble is looked up as its bf16's low and high byte, and ST4 interleaves
// (low, high) of the pair's two k back into the lanes' 32-bit pairs: pair vector q holds
// (b0, b1) of the low nibbles for q = 0, (b2, b3) for 1, and the high nibbles' for 2 and 3.
inline void decode_fp4_bf16_panel_neon(const uint8_t* prepared, int64_t chunks, uint16_t* panel) {
  uint8_t lo_bytes[16], hi_bytes[16];
  for (int i = 0; i < 16; ++i) {
    lo_bytes[i] = uint8_t(kE2M1Bf16[i]);
    hi_bytes[i] = uint8_t(kE2M1Bf16[i] >> 8);
  }
  const uint8x16_t lo_table = vld1q_u8(lo_bytes), hi_table = vld1q_u8(hi_bytes);
  const uint8x16_t nibble = vdupq_n_u8(0x0F);
  for (int64_t j = 0; j < chunks; ++j) {
    const uint8x16x4_t b = vld4q_u8(prepared + j * 64);
    uint8_t* dst = reinterpret_cast<uint8_t*>(panel + j * 128);
    for (int q = 0; q < 4; ++q) {
      uint8x16_t codes[2];
      for (int i = 0; i < 2; ++i) {
        const uint8x16_t byte = b.val[(q & 1) * 2 + i];
        codes[i] = q < 2 ? vandq_u8(byte, nibble) : vshrq_n_u8(byte, 4);
      }
      uint8x16x4_t out;
      out.val[0] = vqtbl1q_u8(lo_table, codes[0]);
      out.val[1] = vqtbl1q_u8(hi_table, codes[0]);
      out.val[2] = vqtbl1q_u8(lo_table, codes[1]);
      out.val[3] = vqtbl1q_u8(hi_table, codes[1]);
      vst4q_u8(dst + q * 64, out);
    }
  }
}

// Weight-only fp4 (bf16 activations): the prepared weight decoded to bf16 once per pair, then
// the MXFP8 tiles with SFV / 2 pairs per block.
template <typename Step>
void qkv_fp4_bf16_pair_neon_with(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  decode_fp4_bf16_panel_neon(prepared_pair_data(p, pair), p.k * kPairCols / 128, bf16_panel);
  if (p.sfv == 16) {
    bf16_panel_tiles_neon<Step, 8>(p, pair, bf16_panel);
  } else {
    bf16_panel_tiles_neon<Step, 16>(p, pair, bf16_panel);
  }
}

}  // namespace
}  // namespace quantkv::cpu
