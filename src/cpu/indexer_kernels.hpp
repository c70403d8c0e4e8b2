// Internal: the score kernels of the lightning indexer (contract §3), one per ISA, and the
// canonical reduction order they all follow (docs/indexer.md, "Canonical order").
//
// Every variant computes, for each token of a work item and each key of its tile,
//   dot_h  = 0;  for p in 0..D/2-1: dot_h = fma(q[2p+1], k[2p+1], dot_h); dot_h = fma(q[2p], k[2p],
//   dot_h) s      = 0;  for h in 0..H-1:   s = fma(max(0, dot_h), q_s[h], s)        // max(0, NaN)
//   = NaN score  = s * k_scale
// with every step rounded to fp32 (round to nearest even). The dot order is exactly what one
// vdpbf16ps lane does per bf16 pair (odd product first; verified bitwise by
// indexer_test.cpp), the products of e4m3 values are exact in fp32, and no denormal can occur
// (every product is a multiple of 2^-18), so the scalar, AVX2 and AVX-512 paths give the same
// bits and therefore the same indices.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quantkv::cpu {

// Keys per work item: one tile is repacked once and scored against every token that sees it.
inline constexpr int kIndexerKeyTile = 256;
// Keys per register block; score rows are padded to a multiple of this, since kernels write
// whole blocks.
inline constexpr int kIndexerKeyBlock = 64;
static_assert(kIndexerKeyTile % kIndexerKeyBlock == 0);

// One work item: a tile of up to kIndexerKeyTile consecutive keys of one sequence against a
// contiguous range of that sequence's tokens.
struct IndexerTile {
  int head_dim = 0;   // D, a multiple of 16
  int num_heads = 0;  // H
  // K of the tile, gathered through the page table by the driver.
  const uint8_t* const* k_rows = nullptr;  // [num_keys] -> D e4m3 bytes (or D/2 e2m1 bytes)
  const float* k_scales = nullptr;         // [num_keys] (MXFP4: mxfp4_key_scale)
  // fp4 keys (indexer_mxfp4.hpp): k_rows hold e2m1 codes and k_block_scales[c] the D/32
  // ue8m0 bytes (MXFP4) or the D/16 e4m3 bytes (NVFP4, k_nvfp4) of key c; null for e4m3 keys.
  const uint8_t* const* k_block_scales = nullptr;
  bool k_nvfp4 = false;
  int num_keys = 0;  // 1..kIndexerKeyTile
  // Tokens, staged by the driver.
  const uint16_t* q_bf16 = nullptr;  // [num_tokens, H, D] bf16 bits (exact copies of e4m3 q)
  const float* q_s = nullptr;        // [num_tokens, H]
  int num_tokens = 0;
  // Token k needs the first min(key_limit0 + k * key_limit_step, num_keys) keys of the tile
  // (>= 1 for every token of the item; the causal mask makes the step 1).
  int64_t key_limit0 = 0;
  int key_limit_step = 0;
  // Score rows: token k writes scores[row_offsets[k] + c] for the tile's key c (the driver
  // has offset the rows to the tile's first key). Rows are padded so that whole key blocks fit.
  float* scores = nullptr;
  const int64_t* row_offsets = nullptr;  // [num_tokens]
};

inline int tile_key_limit(const IndexerTile& t, int token) {
  const int64_t lim = t.key_limit0 + int64_t(token) * t.key_limit_step;
  return lim < t.num_keys ? int(lim) : t.num_keys;
}

// Per-thread scratch every variant needs for one tile: the repacked K (at most 4 bytes per
// element) followed by one token's q as f32 (at least 16 rows of D, to stage key rows).
inline std::size_t indexer_tile_k_bytes(int head_dim) {
  return std::size_t(kIndexerKeyTile) * std::size_t(head_dim) * sizeof(float);
}
inline std::size_t indexer_tile_scratch_bytes(int head_dim, int num_heads) {
  const std::size_t q_rows = std::size_t(num_heads > 16 ? num_heads : 16);
  return indexer_tile_k_bytes(head_dim) + q_rows * std::size_t(head_dim) * sizeof(float) + 64;
}

using IndexerTileFn = void (*)(const IndexerTile& tile, void* scratch);

void indexer_score_tile_scalar(const IndexerTile& tile, void* scratch);
void indexer_score_tile_avx2(const IndexerTile& tile, void* scratch);
// AVX-512 BF16 (vdpbf16ps; indexer_scores_avx512bf16.cpp): call only when
// cpu_features().avx512bf16 (the avx512 level itself does not require it).
void indexer_score_tile_avx512bf16(const IndexerTile& tile, void* scratch);
// The same kernel with the K decode by byte tables (AVX-512 VBMI, e.g. Zen 4, Ice Lake and
// later); call only when cpu_features().avx512bf16 and .avx512vbmi.
void indexer_score_tile_avx512bf16_vbmi(const IndexerTile& tile, void* scratch);
void indexer_score_tile_neon(const IndexerTile& tile, void* scratch);       // aarch64
void indexer_score_tile_neon_bf16(const IndexerTile& tile, void* scratch);  // aarch64 + BF16

// The canonical per-head dot product of one bf16 pair, as one vdpbf16ps lane computes it
// (odd element first). Scalar, for the scalar kernel and the reference.
float canonical_dot(const float* q, const float* k, int head_dim);

}  // namespace quantkv::cpu

namespace quantkv::cpu {
// One vdpbf16ps on 16 lanes: acc[l] += a[2l+1]*b[2l+1] + a[2l]*b[2l] as the hardware does it
// (exposed so the tests can check the canonical order against the instruction itself). Call
// only when cpu_features().avx512bf16.
void dpbf16ps_once_avx512bf16(const uint16_t* a, const uint16_t* b, float* acc);
}  // namespace quantkv::cpu
