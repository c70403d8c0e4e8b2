// AVX-512 VNNI pair kernel of the fused QKV projection for NVFP4 / MXFP4.
//
// The pair's packed weight is decoded once per call into a panel of biased doubled codes
// (b + 12, unsigned, by vpshufb), which stays in L2 while register tiles of rows stream over
// it: vpdpbusd multiplies the unsigned panel bytes by the broadcast signed activation codes,
// four k per lane, into a block accumulator that starts at -12 * (block sum of the row's
// codes) and so ends at the exact integer block dot product. One cvt + mul + fma per block
// applies the scales in the canonical order of qkv_kernels.hpp.
#include <immintrin.h>

#include "cpu/qkv_avx512.hpp"
#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kTileRows = kRowTile;
// Up to this many row tiles, no panel: each tile decodes the weight in registers (measured on
// Zen 4, K=8192 N=10240: M = 8 3.4-4.3 -> 3.1-3.4 ms, M = 16 6.3-6.6 -> 5.8-5.9 ms; even at M =
// 32).
constexpr int kDirectTiles = 3;

void decode_fp4_panel_avx512(const uint8_t* prepared, int64_t chunks, uint8_t* panel) {
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedDoubledE2M1)));
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int64_t j = 0; j < chunks; ++j) {
    // The pair's weight comes from memory once per call (see kDirectPrefetchBlocks).
    _mm_prefetch(reinterpret_cast<const char*>(prepared + (j + kPanelPrefetchChunks) * 64),
                 _MM_HINT_T1);
    const __m512i v = _mm512_loadu_si512(prepared + j * 64);
    const __m512i lo = _mm512_and_si512(v, nib);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
    _mm512_store_si512(panel + j * 128, _mm512_shuffle_epi8(table, lo));
    _mm512_store_si512(panel + j * 128 + 64, _mm512_shuffle_epi8(table, hi));
  }
}

// Rows [m0, m0 + R) x 32 columns; G = SFV / 4 groups of 4 k per block. With `next`, block
// kb of the next pair's weight and scales is prefetched into L2 at step kb, so that pair's
// panel decode reads from L2 instead of waiting on memory.
template <int R, int G>
void fp4_tile(const QkvProblem& p, const uint8_t* panel, const uint16_t* wscale, int64_t m0,
              NextPair next, float* tile) {
  static_assert(R <= kRowTile, "a register tile lies within one activation tile");
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int64_t t = m0 / kRowTile;
  const uint32_t* units = p.a.units + t * p.kb_count * G * kRowTile;
  const int32_t* corr = p.a.corr + t * p.kb_count * kRowTile;
  const float* sa = p.a.scale + t * p.kb_count * kRowTile;
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = panel + kb * 2 * G * 64;
    next.prefetch_block(kb, G * 64);  // both halves' G / 2 chunks
    const uint32_t* u = units + kb * G * kRowTile;
    __m512i blk[R][2];
    for (int r = 0; r < R; ++r) blk[r][0] = blk[r][1] = _mm512_set1_epi32(corr[kb * kRowTile + r]);
    for (int g = 0; g < G; ++g) {
      const __m512i w0 = _mm512_load_si512(w + g * 64);
      const __m512i w1 = _mm512_load_si512(w + (G + g) * 64);
      for (int r = 0; r < R; ++r) {
        const __m512i a = _mm512_set1_epi32(int32_t(u[g * kRowTile + r]));
        blk[r][0] = _mm512_dpbusd_epi32(blk[r][0], w0, a);
        blk[r][1] = _mm512_dpbusd_epi32(blk[r][1], w1, a);
      }
    }
    apply_block_scales<R>(wscale + kb * 32, sa + kb * kRowTile, blk, acc);
  }
  store_rows<R>(acc, tile);
}

// Decode-sized M (one row tile): the prepared chunks are decoded in registers, so the weight
// is read once from memory and no panel is written; the integer sums are the same (exact).
template <int R, int G>
void fp4_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                     int64_t m0, DirectPrefetch ahead, float* tile) {
  const __m512i table =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedDoubledE2M1)));
  const __m512i nib = _mm512_set1_epi8(0x0F);
  constexpr int kChunks = G / 2;                 // 64-byte chunks per block and half
  constexpr int kBlockBytes = 2 * kChunks * 64;  // both halves
  const int64_t t = m0 / kRowTile;               // the activation tile of rows m0 .. m0 + R - 1
  const uint32_t* units = p.a.units + t * p.kb_count * G * kRowTile;
  const int32_t* corr = p.a.corr + t * p.kb_count * kRowTile;
  const float* sa = p.a.scale + t * p.kb_count * kRowTile;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = prepared + kb * kBlockBytes;
    // The weight and its scales are read once, from memory: every line kDirectPrefetchBlocks
    // blocks ahead, into L2 (the hardware prefetcher alone leaves the stream at about half
    // the read bandwidth).
    ahead.at(kb, kBlockBytes);
    ahead.near<kBlockBytes>(kb, p.kb_count);
    const uint32_t* u = units + kb * G * kRowTile;
    __m512i blk[R][2];
    for (int r = 0; r < R; ++r) {
      blk[r][0] = blk[r][1] = _mm512_set1_epi32(corr[kb * kRowTile + r]);
    }
    for (int j = 0; j < kChunks; ++j) {
      __m512i lo[2], hi[2];
      for (int h = 0; h < 2; ++h) {
        const __m512i v = _mm512_loadu_si512(w + (h * kChunks + j) * 64);
        lo[h] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, nib));
        hi[h] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
      }
      for (int r = 0; r < R; ++r) {
        const __m512i a_lo = _mm512_set1_epi32(int32_t(u[(2 * j) * kRowTile + r]));
        const __m512i a_hi = _mm512_set1_epi32(int32_t(u[(2 * j + 1) * kRowTile + r]));
        for (int h = 0; h < 2; ++h) {
          blk[r][h] = _mm512_dpbusd_epi32(blk[r][h], lo[h], a_lo);
          blk[r][h] = _mm512_dpbusd_epi32(blk[r][h], hi[h], a_hi);
        }
      }
    }
    apply_block_scales<R>(wscale + kb * 32, sa + kb * kRowTile, blk, acc);
  }
  store_rows<R>(acc, tile);
}

template <int G>
void fp4_pair(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  const uint8_t* prepared = prepared_pair_data(p, pair);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  if (p.m <= kTileRows * kDirectTiles) {
    // Each row tile streams the pair's weight itself (from memory behind its prefetches for
    // the first, from L2 after), decoding it in registers: cheaper than a panel at this M.
    const DirectPrefetch stream = DirectPrefetch::of(p, pair);
    for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
      const DirectPrefetch ahead = m0 == 0 ? stream : DirectPrefetch{};
      with_static_count<kTileRows>(
          rows, [&](auto r) { fp4_tile_direct<r, G>(p, prepared, wscale, m0, ahead, tile); });
    });
    return;
  }
  decode_fp4_panel_avx512(prepared, p.k * kPairCols / 128, panel);
  const NextPair next = NextPair::of(p, pair);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    // The first row tile prefetches the next pair (see fp4_tile).
    const NextPair ahead = m0 == 0 ? next : NextPair{};
    with_static_count<kTileRows>(
        rows, [&](auto r) { fp4_tile<r, G>(p, panel, wscale, m0, ahead, tile); });
  });
}

}  // namespace

void qkv_fp4_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  with_fp4_groups(p.sfv, [&](auto g) { fp4_pair<g>(p, pair, panel); });
}

}  // namespace quantkv::cpu
