// Internal: the AVX-512 pair kernels of the GEMM core whose block sums follow the bf16 dot
// product's lane order (contract §4's MXFP8 and the weight-only modes; the canonical order of
// qkv_kernels.hpp): t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p] per lane, every product exact.
// The arithmetic of one step is a policy `Dot`:
//   Dot::W weight(__m512i pair_vector), Dot::A activation(uint32_t unit),
//   __m512 step(__m512 t, Dot::W, Dot::A)
// qkv_mxfp8_avx512bf16.cpp instantiates it with vdpbf16ps (CPUs with AVX512_BF16),
// qkv_bf16_fma_avx512.cpp with two fma per pair (AVX-512F only: Ice Lake, Cascade Lake). Include
// only from files compiled with AVX-512 flags (internal linkage: see qkv_kernels.hpp).
#pragma once

#include <immintrin.h>

#include "cpu/qkv_avx512.hpp"
#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kTileRows = kRowTile;
// P, the bf16 pairs per scale block: 16 for MXFP8 (and weight-only MXFP4), 8 for a
// weight-only NVFP4 weight.

// The weight decoders of the bf16 kernels: operator() widens kBytes prepared bytes of one half
// into kPairs bf16 pair vectors (16 columns x 2 k each). The decode-sized kernel prefetches
// the weight with the stream prefetch of the fp4 kernels (DirectPrefetch: every line
// kDirectPrefetchBlocks blocks ahead, into L2) when `kStream`, else `kPrefetch` bytes ahead
// into L1. Measured for the fp4 weight on a Xeon model 207 VM (1 thread, three alternating
// runs): Qwen3 experts T = 1 2.50-2.67 -> 2.16-2.29 ms, QKV NVFP4 Llama-3-8B M = 1 0.79-0.89 ->
// 0.67-0.77 ms, MXFP4 0.76-0.80 -> 0.66-0.74 ms, gpt-oss experts unchanged (5.7-6.0 ms);
// MXFP8 blocks of 1 KB with the stream prefetch were slower (4.2-4.7 -> 5.0 ms), so it keeps
// the L1 one.
// MXFP8: 32 e4m3 bytes -> one vector, with the one AVX-512 decoder (its table in a register).
struct E4m3Decoder {
  static constexpr int kPairs = 1, kBytes = 32, kPrefetch = 4096;
  static constexpr bool kStream = false;
  __m512i subnormals = simd::e4m3_subnormal_bf16_table();
  void operator()(const uint8_t* src, __m512i out[kPairs]) const {
    out[0] =
        simd::e4m3_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), subnormals);
  }
};

// kUnit: every activation block scale is 1 (QkvActivations::unit_scale).
template <typename Dot, int R, int kPairsPerBlock, bool kUnit>
void mxfp8_tile(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale, int64_t m0,
                float* tile) {
  static_assert(R <= kRowTile, "a register tile lies within one activation tile");
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  // m0 starts an activation tile; its groups are the kPairsPerBlock bf16 pairs of a block.
  const uint32_t* units = p.a.units + act_unit_index(p, m0, 0, 0);
  const float* sa = p.a.scale + act_block_index(p, m0, 0);
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint16_t* w = panel + kb * 2 * kPairsPerBlock * 32;
    const uint32_t* u = units + kb * kPairsPerBlock * kRowTile;
    __m512 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
    for (int pv = 0; pv < kPairsPerBlock; ++pv) {
      const typename Dot::W w0 = Dot::weight(_mm512_load_si512(w + pv * 32));
      const typename Dot::W w1 = Dot::weight(_mm512_load_si512(w + (kPairsPerBlock + pv) * 32));
      for (int r = 0; r < R; ++r) {
        const typename Dot::A a = Dot::activation(u[pv * kRowTile + r]);
        t[r][0] = Dot::step(t[r][0], w0, a);
        t[r][1] = Dot::step(t[r][1], w1, a);
      }
    }
    if constexpr (kUnit) {
      apply_unit_block_scales<R>(wscale + kb * 32, t, acc);
    } else {
      apply_block_scales<R>(wscale + kb * 32, sa + kb * kRowTile, t, acc);
    }
  }
  store_rows<R>(acc, tile);
}

template <typename Dot, int P, bool kUnit>
void mxfp8_rows(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale, int64_t m0,
                int rows, float* tile) {
  with_static_count<kTileRows>(
      rows, [&](auto r) { mxfp8_tile<Dot, r, P, kUnit>(p, panel, wscale, m0, tile); });
}

// One 64-byte chunk of the prepared fp4 weight (16 lanes x 8 k) -> its four bf16 pair
// vectors (see decode_fp4_bf16_panel_scalar): bytes 0-1 and 2-3 of each lane spread to one byte
// per 16-bit word by an in-lane vpshufb, then each nibble through a vpermw table. vpermw reads
// the low 5 bits of a word, so the table holds kE2M1Bf16 twice and the low nibble needs no mask
// (bit 4 is the high nibble's); the high nibble is the word shifted right by 4. Per chunk: 2
// vpshufb, 2 shifts, 4 vpermw (6 uops on port 5, where vpmovdw + vpmovzxbw took 10).
struct Fp4ToBf16 {
  static constexpr int kPairs = 4, kBytes = kFp4ChunkBytes;
  static constexpr bool kStream = true;
  __m512i table, spread01, spread23;
  Fp4ToBf16() {
    const __m256i t16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kE2M1Bf16));
    table = _mm512_inserti64x4(_mm512_castsi256_si512(t16), t16, 1);
    // Per 128-bit lane, dword d = bytes 4d..4d+3: word 2d <- byte 4d (+2), word 2d+1 <- byte
    // 4d+1 (+2), high bytes zero (index bit 7 set).
    const __m128i s01 = _mm_setr_epi8(0, -1, 1, -1, 4, -1, 5, -1, 8, -1, 9, -1, 12, -1, 13, -1);
    spread01 = _mm512_broadcast_i32x4(s01);
    spread23 = _mm512_broadcast_i32x4(_mm_add_epi8(s01, _mm_set1_epi16(2)));
  }
  void operator()(const uint8_t* chunk, __m512i out[kPairs]) const {
    const __m512i v = _mm512_loadu_si512(chunk);
    const __m512i b01 = _mm512_shuffle_epi8(v, spread01);
    const __m512i b23 = _mm512_shuffle_epi8(v, spread23);
    out[0] = _mm512_permutexvar_epi16(b01, table);
    out[1] = _mm512_permutexvar_epi16(b23, table);
    out[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b01, 4), table);
    out[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b23, 4), table);
  }
};

// The bf16 panel [kb][half][P pairs][32] of a pair: every group of the weight decoded once.
template <typename Decoder>
void decode_bf16_panel(const uint8_t* prepared, uint16_t* dst, int64_t values) {
  const Decoder decode;
  for (int64_t j = 0; j < values / (Decoder::kPairs * 32); ++j) {
    __m512i v[Decoder::kPairs];
    decode(prepared + j * Decoder::kBytes, v);
    for (int q = 0; q < Decoder::kPairs; ++q)
      _mm512_store_si512(dst + (j * Decoder::kPairs + q) * 32, v[q]);
  }
}

// Decode-sized M (one row tile): the prepared weight is widened in registers, group by group,
// so it is read once from memory and no panel is written. Same order as the panel tiles, same
// bits.
template <typename Dot, int R, int kPairsPerBlock, typename Decoder, bool kUnit>
void bf16_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                      DirectPrefetch ahead, float* tile) {
  constexpr int kGroups = kPairsPerBlock / Decoder::kPairs;  // per half and block
  constexpr int kHalfBytes = kGroups * Decoder::kBytes;
  const Decoder decode;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = prepared + kb * 2 * kHalfBytes;
    if constexpr (Decoder::kStream) ahead.at(kb, 2 * kHalfBytes);
    const uint32_t* u = p.a.units + kb * kPairsPerBlock * kRowTile;  // tile 0: rows 0..R-1
    __m512 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
    for (int j = 0; j < kGroups; ++j) {
      if constexpr (!Decoder::kStream) {
        _mm_prefetch(reinterpret_cast<const char*>(w + j * Decoder::kBytes + Decoder::kPrefetch),
                     _MM_HINT_T0);
      }
      __m512i w0[Decoder::kPairs], w1[Decoder::kPairs];
      decode(w + j * Decoder::kBytes, w0);
      decode(w + kHalfBytes + j * Decoder::kBytes, w1);
      for (int q = 0; q < Decoder::kPairs; ++q) {
        const typename Dot::W v0 = Dot::weight(w0[q]), v1 = Dot::weight(w1[q]);
        for (int r = 0; r < R; ++r) {
          const typename Dot::A a = Dot::activation(u[(Decoder::kPairs * j + q) * kRowTile + r]);
          t[r][0] = Dot::step(t[r][0], v0, a);
          t[r][1] = Dot::step(t[r][1], v1, a);
        }
      }
    }
    if constexpr (kUnit) {
      apply_unit_block_scales<R>(wscale + kb * 32, t, acc);
    } else {
      apply_block_scales<R>(wscale + kb * 32, p.a.scale + kb * kRowTile, t, acc);
    }
  }
  store_rows<R>(acc, tile);
}

// A pair with P bf16 pairs per scale block, its weight widened by Decoder; kUnit as above.
template <typename Dot, int P, typename Decoder, bool kUnit>
void bf16_pair(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  const uint8_t* prepared = prepared_pair_data(p, pair);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  if (p.m <= kTileRows) {
    const DirectPrefetch ahead = DirectPrefetch::of(p, pair);
    for_each_row_tile<kTileRows>(p, pair, [&](int64_t, int rows, float* tile) {
      with_static_count<kTileRows>(rows, [&](auto r) {
        bf16_tile_direct<Dot, r, P, Decoder, kUnit>(p, prepared, wscale, ahead, tile);
      });
    });
    return;
  }
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  decode_bf16_panel<Decoder>(prepared, bf16_panel, p.k * kPairCols);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    mxfp8_rows<Dot, P, kUnit>(p, bf16_panel, wscale, m0, rows, tile);
  });
}

// The two entry points of a Dot: MXFP8 (16 pairs per 32-value block) and the weight-only fp4
// weight (SFV / 2 pairs per block: 8 for NVFP4, 16 for MXFP4).
// MXFP8 takes e4m3 activations with their scales (W8A8) or bf16 ones (W8A16, unit scales);
// the weight-only fp4 weight only bf16 activations.
template <typename Dot>
void bf16_order_mxfp8_pair(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  if (p.a.unit_scale) {
    bf16_pair<Dot, 16, E4m3Decoder, true>(p, pair, panel);
  } else {
    bf16_pair<Dot, 16, E4m3Decoder, false>(p, pair, panel);
  }
}
template <typename Dot>
void bf16_order_fp4_pair(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  if (p.sfv == 16) {
    bf16_pair<Dot, 8, Fp4ToBf16, true>(p, pair, panel);
  } else {
    bf16_pair<Dot, 16, Fp4ToBf16, true>(p, pair, panel);
  }
}

}  // namespace
}  // namespace quantkv::cpu
