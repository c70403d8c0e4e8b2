// Scalar pair kernels of the fused QKV projection: the fallback on every CPU. They read the same
// decoded panels as the SIMD kernels and follow the canonical order of qkv_kernels.hpp with
// std::fma, so every path gives the same bits.
#include <cmath>
#include <cstring>

#include "cpu/convert_kernels.hpp"
#include "cpu/qkv_kernels.hpp"

namespace quantkv::cpu {

void decode_fp4_panel_scalar(const uint8_t* prepared, int64_t chunks, uint8_t* panel) {
  for (int64_t j = 0; j < chunks; ++j) {
    for (int i = 0; i < 64; ++i) {
      const uint8_t v = prepared[j * 64 + i];
      panel[j * 128 + i] = kBiasedDoubledE2M1[v & 0xF];
      panel[j * 128 + 64 + i] = kBiasedDoubledE2M1[v >> 4];
    }
  }
}

void decode_fp4_bf16_panel_scalar(const uint8_t* prepared, int64_t chunks, uint16_t* panel) {
  for (int64_t j = 0; j < chunks; ++j) {
    const uint8_t* src = prepared + j * 64;
    uint16_t* dst = panel + j * 128;
    for (int lane = 0; lane < kHalfCols; ++lane) {
      const uint8_t* b = src + lane * 4;
      for (int q = 0; q < 4; ++q) {
        const uint8_t lo = b[(q & 1) * 2], hi = b[(q & 1) * 2 + 1];
        const int shift = q < 2 ? 0 : 4;
        dst[q * 32 + lane * 2] = kE2M1Bf16[(lo >> shift) & 0xF];
        dst[q * 32 + lane * 2 + 1] = kE2M1Bf16[(hi >> shift) & 0xF];
      }
    }
  }
}

namespace {
constexpr int kTileRows = 4;

// c of rows [m0, m0 + rows) x the pair's 32 columns -> tile [rows][32].
void fp4_tile(const QkvProblem& p, const uint8_t* panel, const uint16_t* wscale, int64_t m0,
              int rows, float* tile) {
  const int groups = p.sfv / 4;
  for (int r = 0; r < rows; ++r) {
    const int64_t m = m0 + r;
    for (int col = 0; col < kPairCols; ++col) {
      const int half = col / kHalfCols, lane = col % kHalfCols;
      float acc = 0.0f;
      for (int64_t kb = 0; kb < p.kb_count; ++kb) {
        const uint8_t* w = panel + ((kb * 2 + half) * groups) * 64 + lane * 4;
        int32_t idot = p.a.corr[act_block_index(p, m, kb)];
        for (int g = 0; g < groups; ++g) {
          const uint32_t unit = p.a.units[act_unit_index(p, m, kb, g)];
          int8_t a[4];
          std::memcpy(a, &unit, 4);
          for (int i = 0; i < 4; ++i) idot += int32_t(w[g * 64 + i]) * int32_t(a[i]);
        }
        const float sb = bf16_bits_to_float(wscale[(kb * 2 + half) * kHalfCols + lane]);
        const float s = p.a.scale[act_block_index(p, m, kb)] * sb;
        acc = std::fma(float(idot), s, acc);
      }
      tile[r * kPairCols + col] = acc;
    }
  }
}

void mxfp8_tile(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale, int64_t m0,
                int rows, float* tile) {
  for (int r = 0; r < rows; ++r) {
    const int64_t m = m0 + r;
    for (int col = 0; col < kPairCols; ++col) {
      const int half = col / kHalfCols, lane = col % kHalfCols;
      float acc = 0.0f;
      const int pairs = p.sfv / 2;  // 16 for MXFP8; 8 for a weight-only NVFP4 weight
      for (int64_t kb = 0; kb < p.kb_count; ++kb) {
        const uint16_t* w = panel + (kb * 2 + half) * pairs * 32 + lane * 2;
        float t = 0.0f;
        for (int pv = 0; pv < pairs; ++pv) {
          const uint32_t unit = p.a.units[act_unit_index(p, m, kb, pv)];
          uint16_t a[2];  // bf16 of k = 2pv (even), 2pv + 1 (odd)
          std::memcpy(a, &unit, 4);
          t = t + bf16_bits_to_float(a[1]) * bf16_bits_to_float(w[pv * 32 + 1]);
          t = t + bf16_bits_to_float(a[0]) * bf16_bits_to_float(w[pv * 32]);
        }
        const float sb = bf16_bits_to_float(wscale[(kb * 2 + half) * kHalfCols + lane]);
        const float s = p.a.scale[act_block_index(p, m, kb)] * sb;
        acc = std::fma(t, s, acc);
      }
      tile[r * kPairCols + col] = acc;
    }
  }
}

}  // namespace

void qkv_fp4_pair_scalar(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  decode_fp4_panel_scalar(prepared_pair_data(p, pair), p.k * kPairCols / 128, panel);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    fp4_tile(p, panel, wscale, m0, rows, tile);
  });
}

void qkv_mxfp8_pair_scalar(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  convert_e4m3_to_bf16_scalar(prepared_pair_data(p, pair), bf16_panel, p.k * kPairCols);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    mxfp8_tile(p, bf16_panel, wscale, m0, rows, tile);
  });
}

void qkv_fp4_bf16_pair_scalar(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  decode_fp4_bf16_panel_scalar(prepared_pair_data(p, pair), p.k * kPairCols / 128, bf16_panel);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    mxfp8_tile(p, bf16_panel, wscale, m0, rows, tile);
  });
}

}  // namespace quantkv::cpu
