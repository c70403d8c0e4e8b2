// AVX2 pair kernel of the fused QKV projection for NVFP4 / MXFP4: the same decoded panel as the
// AVX-512 kernel, with pmaddubsw (unsigned panel bytes x signed activation codes; |sum of two|
// <= 576, so it never saturates) summed in int16 lanes over a block (each lane gathers SFV / 4
// such sums, two k of one column per group: |lane| <= 8 * 576 = 4608 < 2^15, exact), then one
// pmaddwd per block to reach the exact int32 block dot products (the same integers as a pmaddwd
// after every pmaddubsw, with half the multiplies).
//
// Register blocking for 16 ymm registers: a tile is 4 rows x one 16-column half, so a block
// step holds 8 int16 block accumulators, the 2 weight vectors of the group (each loaded once
// and used by all 4 rows), one broadcast activation unit and the pmaddwd ones. The fp32 row
// accumulators live in the L1-resident output tile (touched once per block, not per step).
// The panel (codes and the pair's weight scales as fp32) is decoded once per pair and reused
// by every row tile, so its cost is amortised over M.
#include <immintrin.h>

#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx2.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kTileRows = 4;
constexpr int kDirectRows = 2;   // rows of a tile whose weight is decoded in registers
constexpr int kDirectTiles = 2;  // up to this many such tiles, no panel (M = 4, K=8192: 5.4-6.6
                                 // -> 3.5-3.7 ms on Zen 4; no gain at M = 8)

void decode_fp4_panel_avx2(const uint8_t* prepared, int64_t chunks, uint8_t* panel) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedDoubledE2M1)));
  const __m256i nib = _mm256_set1_epi8(0x0F);
  for (int64_t j = 0; j < chunks * 2; ++j) {  // 32-byte halves of the 64-byte chunks
    // The pair's weight comes from memory once per call (see kDirectPrefetchBlocks).
    if (j % 2 == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(prepared + (j / 2 + kPanelPrefetchChunks) * 64),
                   _MM_HINT_T1);
    }
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(prepared + j * 32));
    const __m256i lo = _mm256_and_si256(v, nib);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    uint8_t* dst = panel + (j / 2) * 128 + (j % 2) * 32;
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_shuffle_epi8(table, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 64), _mm256_shuffle_epi8(table, hi));
  }
}

// Integer adds may be reassociated: left alone, GCC turns the block sums into trees of
// products parked on the stack (16 ymm registers are too few for that). An empty asm on the
// accumulators after each step keeps the chains as written, in registers.
inline void keep_in_registers(__m256i& a, __m256i& b) { __asm__("" : "+x"(a), "+x"(b)); }

// The tile functions stay out of line: inlined into the pair's dispatch lambdas (one function
// for every R and G), GCC 12 kept the block accumulators on the stack, a store-forwarding round
// trip per step (`vpaddd -0x330(%rbp)`; check with objdump that the tile loops touch no stack).
// Out of line they live in registers: MXFP4 Llama-3-8B QKV M = 512 on Zen 3, 2 threads, 155-191
// -> 119-125 ms, and with the int16 block sums 73-85 ms.

// A block's int16 lanes hold sums of pmaddubsw results, each |.| <= 2 * 24 * 12 = 576 (biased
// weight codes <= 24, doubled activation codes |.| <= 12), one per group of the block.
inline constexpr int kMaxPmaddubswSum = 2 * (2 * kFp4Bias) * 12;  // 576
template <int G>
constexpr bool kInt16BlockSumsExact = (G * kMaxPmaddubswSum) <= 32767;  // G = SFV / 4

// The exact int32 block dot: corr + the int16 lanes widened and summed in pairs.
inline __m256i widen_block_sum(__m256i sum16, int32_t corr, __m256i ones) {
  return _mm256_add_epi32(_mm256_set1_epi32(corr), _mm256_madd_epi16(sum16, ones));
}

// Where row m's activations start; rows of one register tile may lie in two activation tiles.
struct RowActs {
  const uint32_t* units;  // + (kb * G + g) * kRowTile
  const int32_t* corr;    // + kb * kRowTile
  const float* scale;     // + kb * kRowTile
};
inline RowActs row_acts(const QkvProblem& p, int64_t m) {
  return {p.a.units + act_unit_index(p, m, 0, 0), p.a.corr + act_block_index(p, m, 0),
          p.a.scale + act_block_index(p, m, 0)};
}

// One block's exact integer dots -> acc (8 columns): acc = fma(float(idot), fl(sa * sb), acc).
inline void apply_block(__m256i idot, float sa, __m256 sb, float* acc) {
  const __m256 s = _mm256_mul_ps(_mm256_set1_ps(sa), sb);
  _mm256_storeu_ps(acc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot), s, _mm256_loadu_ps(acc)));
}

// Rows [m0, m0 + R) x the 16 columns of `half` -> tile rows (stride kPairCols); G = SFV / 4.
// With `next`, block kb of the next pair is prefetched into L2 at step kb (see NextPair).
template <int R, int G>
[[gnu::noinline]] void fp4_half_tile(const QkvProblem& p, const uint8_t* panel, const float* sb,
                                     int64_t m0, int half, NextPair next, float* tile) {
  const __m256i ones = _mm256_set1_epi16(1);
  RowActs rows[R];
  for (int r = 0; r < R; ++r) rows[r] = row_acts(p, m0 + r);
  float* out = tile + half * kHalfCols;
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * kPairCols, _mm256_setzero_ps());
    _mm256_storeu_ps(out + r * kPairCols + 8, _mm256_setzero_ps());
  }
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = panel + (kb * 2 + half) * G * 64;
    next.prefetch_block(kb, G * 64);  // both halves' G / 2 chunks
    __m256i blk[R][2];                // int16 block sums
    for (int r = 0; r < R; ++r) blk[r][0] = blk[r][1] = _mm256_setzero_si256();
    for (int g = 0; g < G; ++g) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + g * 64));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + g * 64 + 32));
      for (int r = 0; r < R; ++r) {
        const __m256i a = _mm256_set1_epi32(int32_t(rows[r].units[(kb * G + g) * kRowTile]));
        blk[r][0] = _mm256_add_epi16(blk[r][0], _mm256_maddubs_epi16(w0, a));
        blk[r][1] = _mm256_add_epi16(blk[r][1], _mm256_maddubs_epi16(w1, a));
        keep_in_registers(blk[r][0], blk[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int32_t corr = rows[r].corr[kb * kRowTile];
      blk[r][0] = widen_block_sum(blk[r][0], corr, ones);
      blk[r][1] = widen_block_sum(blk[r][1], corr, ones);
    }
    const __m256 sb0 = _mm256_load_ps(sb + kb * kPairCols + half * kHalfCols);
    const __m256 sb1 = _mm256_load_ps(sb + kb * kPairCols + half * kHalfCols + 8);
    for (int r = 0; r < R; ++r) {
      const float sa = rows[r].scale[kb * kRowTile];
      apply_block(blk[r][0], sa, sb0, out + r * kPairCols);
      apply_block(blk[r][1], sa, sb1, out + r * kPairCols + 8);
    }
  }
}

// Decode-sized M: the prepared chunks are decoded in registers, so the weight is read once
// from memory and no panel is written; the integer sums are the same (exact). Both halves of
// a block in one pass (the 4 R block accumulators fit beside the decode constants for R <= 2),
// so the weight streams strictly in address order, prefetched kDirectPrefetchBlocks ahead.
template <int R, int G>
[[gnu::noinline]] void fp4_tile_direct(const QkvProblem& p, const uint8_t* prepared,
                                       const uint16_t* wscale, int64_t m0, DirectPrefetch ahead,
                                       float* tile) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedDoubledE2M1)));
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  constexpr int kChunks = G / 2;                 // 64-byte chunks per block and half
  constexpr int kBlockBytes = 2 * kChunks * 64;  // both halves
  RowActs rows[R];
  for (int r = 0; r < R; ++r) rows[r] = row_acts(p, m0 + r);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kPairCols; c += 8)
      _mm256_storeu_ps(tile + r * kPairCols + c, _mm256_setzero_ps());
  }
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = prepared + kb * kBlockBytes;
    ahead.at(kb, kBlockBytes);
    ahead.near<kBlockBytes>(kb, p.kb_count);
    __m256i blk[R][4];  // [row][16-column half * 2 + 8-lane part], int16 block sums
    for (int r = 0; r < R; ++r)
      blk[r][0] = blk[r][1] = blk[r][2] = blk[r][3] = _mm256_setzero_si256();
    for (int j = 0; j < kChunks; ++j) {
      for (int q = 0; q < 4; ++q) {  // half q / 2, lanes 8 (q % 2) .. 8 (q % 2) + 7
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(w + ((q / 2) * kChunks + j) * 64 + (q % 2) * 32));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, nib));
        const __m256i hi =
            _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
        for (int r = 0; r < R; ++r) {
          const uint32_t* u = rows[r].units + (kb * G + 2 * j) * kRowTile;
          const __m256i a_lo = _mm256_set1_epi32(int32_t(u[0]));
          const __m256i a_hi = _mm256_set1_epi32(int32_t(u[kRowTile]));
          const __m256i d =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, a_lo), _mm256_maddubs_epi16(hi, a_hi));
          blk[r][q] = _mm256_add_epi16(blk[r][q], d);
          keep_in_registers(blk[r][q], blk[r][q]);
        }
      }
    }
    for (int q = 0; q < 4; ++q) {
      const __m256 sb = simd::load_bf16_as_f32(wscale + kb * kPairCols + q * 8);
      for (int r = 0; r < R; ++r) {
        const __m256i idot = widen_block_sum(blk[r][q], rows[r].corr[kb * kRowTile], ones);
        apply_block(idot, rows[r].scale[kb * kRowTile], sb, tile + r * kPairCols + q * 8);
      }
    }
  }
}

template <int G>
void fp4_pair(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  static_assert(kInt16BlockSumsExact<G>);
  const uint8_t* prepared = prepared_pair_data(p, pair);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  if (p.m <= kDirectRows * kDirectTiles) {
    // Each tile of kDirectRows streams the pair's weight itself (from memory behind its
    // prefetches for the first, from L2 after).
    const DirectPrefetch stream = DirectPrefetch::of(p, pair);
    for_each_row_tile<kDirectRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
      const DirectPrefetch ahead = m0 == 0 ? stream : DirectPrefetch{};
      with_static_count<kDirectRows>(
          rows, [&](auto r) { fp4_tile_direct<r, G>(p, prepared, wscale, m0, ahead, tile); });
    });
    return;
  }
  // Scratch: the codes [kb][half][G][64], then the weight scales [kb][32] as fp32.
  float* sb = reinterpret_cast<float*>(panel + qkv_panel_code_bytes(p.format, p.k));
  decode_fp4_panel_avx2(prepared, p.k * kPairCols / 128, panel);
  simd::widen_bf16_aligned(wscale, p.kb_count * kPairCols, sb);  // once per pair, not per tile
  const NextPair next = NextPair::of(p, pair);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    for (int half = 0; half < 2; ++half) {
      // The first row tile's first half prefetches the next pair.
      const NextPair ahead = m0 == 0 && half == 0 ? next : NextPair{};
      with_static_count<kTileRows>(
          rows, [&](auto r) { fp4_half_tile<r, G>(p, panel, sb, m0, half, ahead, tile); });
    }
  });
}

}  // namespace

void qkv_fp4_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  with_fp4_groups(p.sfv, [&](auto g) { fp4_pair<g>(p, pair, panel); });
}

}  // namespace quantkv::cpu
