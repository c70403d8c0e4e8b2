// Scalar score kernel: the fallback on every CPU. Follows the canonical order of
// indexer_kernels.hpp with plain fmaf, so its bits equal the AVX2 and AVX-512 kernels'.
#include <cmath>

#include "cpu/convert_kernels.hpp"
#include "cpu/indexer_kernels.hpp"
#include "cpu/indexer_mxfp4.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {

float canonical_dot(const float* q, const float* k, int head_dim) {
  float acc = 0.0f;
  for (int p = 0; p < head_dim / 2; ++p) {
    acc = std::fma(q[2 * p + 1], k[2 * p + 1], acc);
    acc = std::fma(q[2 * p], k[2 * p], acc);
  }
  return acc;
}

void indexer_score_tile_scalar(const IndexerTile& t, void* scratch) {
  const int D = t.head_dim, H = t.num_heads;
  float* k = static_cast<float*>(scratch);                  // [num_keys, D]
  float* qf = k + indexer_tile_k_bytes(D) / sizeof(float);  // [D]
  for (int c = 0; c < t.num_keys; ++c) {
    if (t.k_block_scales != nullptr) {
      decode_fp4_key(t.k_nvfp4, t.k_rows[c], t.k_block_scales[c], D, k + c * D);
    } else {
      convert_e4m3_to_f32_scalar(t.k_rows[c], k + c * D, D);
    }
  }
  for (int tok = 0; tok < t.num_tokens; ++tok) {
    const int limit = tile_key_limit(t, tok);
    float* row = t.scores + t.row_offsets[tok];
    for (int c = 0; c < limit; ++c) row[c] = 0.0f;
    for (int h = 0; h < H; ++h) {
      const uint16_t* qh = t.q_bf16 + (std::size_t(tok) * H + h) * D;
      for (int d = 0; d < D; ++d) qf[d] = bf16_to_float(qh[d]);
      const float w = t.q_s[std::size_t(tok) * H + h];
      for (int c = 0; c < limit; ++c) {
        const float dot = canonical_dot(qf, k + c * D, D);
        row[c] = std::fma(0.0f > dot ? 0.0f : dot, w, row[c]);  // max(0, dot) as MAXPS
      }
    }
    for (int c = 0; c < limit; ++c) row[c] *= t.k_scales[c];
  }
}

}  // namespace quantkv::cpu
