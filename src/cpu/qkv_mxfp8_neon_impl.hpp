// Internal: the NEON pair kernels' shared body for MXFP8, instantiated by qkv_mxfp8_neon.cpp
// (FMLA on the split halves of each bf16 pair, every aarch64 CPU) and qkv_mxfp8_neon_bf16.cpp
// (BFMLALT then BFMLALB, ARMv8.6 BF16). Internal linkage throughout, so each file keeps its own
// copy compiled with its own flags.
//
// Both replay the AVX2 kernel's order, t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p], each step a
// fused multiply-add rounding once; the products of bf16 activations and e4m3 weights are exact,
// so each step rounds exactly like the canonical add (qkv_kernels.hpp).
#pragma once

#include "cpu/convert_kernels.hpp"
#include "cpu/qkv_neon_common.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kMxfp8PairsPerBlock = 16;

// Rows [m0, m0 + R) x the 16 columns of `half`. The panel is [kb][half][16 pairs][16 columns][2]
// bf16; Step::add(t, unit, w) adds a row's pair `unit` (bf16 of k = 2p in the low half) times
// 4 columns' pairs `w` (8 bf16) to their lanes, odd product first.
template <typename Step, int R>
void mxfp8_half_tile_neon(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale,
                          int64_t m0, int half, float* tile) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint16_t* w = panel + (kb * 2 + half) * kMxfp8PairsPerBlock * 32;
    float32x4_t t[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) t[r][v] = vdupq_n_f32(0.0f);
    for (int pv = 0; pv < kMxfp8PairsPerBlock; ++pv) {
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

template <typename Step>
void qkv_mxfp8_pair_neon_with(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  convert_e4m3_to_bf16_scalar(prepared_pair_data(p, pair), bf16_panel, p.k * kPairCols);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  for_each_neon_row_tile(p, pair, [&]<int R>(int64_t m0, int half, float* tile) {
    mxfp8_half_tile_neon<Step, R>(p, bf16_panel, wscale, m0, half, tile);
  });
}

}  // namespace
}  // namespace quantkv::cpu
