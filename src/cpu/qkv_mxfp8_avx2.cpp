// AVX2 pair kernel of the fused QKV projection for MXFP8. No bf16 dot product here: the bf16
// panel's pairs are split into their odd and even halves (exact fp32) and each block sum is
// replayed with fma in the vdpbf16ps lane order, t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p]
// (products of e4m3 values are exact, so fma rounds exactly like the add; bf16 activations
// whose products could overflow run on the scalar kernels: run_gemm_batch).
#include <immintrin.h>

#include <array>

#include "cpu/convert_kernels.hpp"
#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx2.hpp"

namespace quantkv::cpu {
namespace {

// A tile is 4 rows x one 16-column half: 8 block sums, the pair's odd and even weight vectors
// (4) and the two broadcast activation halves: 14 of the 16 ymm registers. The fp32 row
// accumulators live in the L1-resident output tile (touched once per block).
constexpr int kTileRows = 4;

// acc (8 columns) = fma(t, fl(sa * sb), acc).
inline void apply_block(__m256 t, float sa, __m256 sb, float* acc) {
  const __m256 s = _mm256_mul_ps(_mm256_set1_ps(sa), sb);
  _mm256_storeu_ps(acc, _mm256_fmadd_ps(t, s, _mm256_loadu_ps(acc)));
}

template <int R>
void mxfp8_half_tile(const QkvProblem& p, const uint16_t* panel, const float* sb, int64_t m0,
                     int half, float* tile) {
  const int kPairsPerBlock = p.sfv / 2;  // 16 for MXFP8; 8 for a weight-only NVFP4 weight
  const uint32_t* units[R];
  const float* sa[R];
  for (int r = 0; r < R; ++r) {
    units[r] = p.a.units + act_unit_index(p, m0 + r, 0, 0);  // + (kb * 16 + pv) * kRowTile
    sa[r] = p.a.scale + act_block_index(p, m0 + r, 0);       // + kb * kRowTile
  }
  float* out = tile + half * kHalfCols;
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * kPairCols, _mm256_setzero_ps());
    _mm256_storeu_ps(out + r * kPairCols + 8, _mm256_setzero_ps());
  }
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint16_t* w = panel + (kb * 2 + half) * kPairsPerBlock * 32;
    __m256 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm256_setzero_ps();
    for (int pv = 0; pv < kPairsPerBlock; ++pv) {
      __m256 w_odd[2], w_even[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + pv * 32 + h * 16));
        w_odd[h] = simd::bf16_pair_odd(v);
        w_even[h] = simd::bf16_pair_even(v);
      }
      for (int r = 0; r < R; ++r) {
        // The unit holds the bf16 pair (even low, odd high): both halves as fp32 by masking.
        const __m256i unit =
            _mm256_set1_epi32(int32_t(units[r][(kb * kPairsPerBlock + pv) * kRowTile]));
        const __m256 a_odd = simd::bf16_pair_odd(unit);
        const __m256 a_even = simd::bf16_pair_even(unit);
        for (int h = 0; h < 2; ++h) {
          t[r][h] = _mm256_fmadd_ps(a_odd, w_odd[h], t[r][h]);
          t[r][h] = _mm256_fmadd_ps(a_even, w_even[h], t[r][h]);
        }
      }
    }
    const __m256 sb0 = _mm256_load_ps(sb + kb * kPairCols + half * kHalfCols);
    const __m256 sb1 = _mm256_load_ps(sb + kb * kPairCols + half * kHalfCols + 8);
    for (int r = 0; r < R; ++r) {
      const float s = sa[r][kb * kRowTile];
      apply_block(t[r][0], s, sb0, out + r * kPairCols);
      apply_block(t[r][1], s, sb1, out + r * kPairCols + 8);
    }
  }
}

// Rows 0..R-1 of a row tile (stride kPairCols) set to zero.
template <int R>
void zero_tile_rows(float* tile) {
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kPairCols; c += 8)
      _mm256_storeu_ps(tile + r * kPairCols + c, _mm256_setzero_ps());
  }
}

// The low and high bytes of a 16-entry word table (kE2M1Bf16, kE2M1Doubled), as pshufb tables.
template <int Shift, const auto& kWords>
alignas(32) constexpr std::array<uint8_t, 32> kWordBytes = simd::nibble_table([](int code) {
  return uint8_t(uint16_t(kWords[code]) >> Shift);
});

// decode_fp4_bf16_panel_scalar with pshufb, on one 32-byte half of a prepared chunk (lanes 8h ..
// 8h + 7): its bytes are reordered within each 128-bit half to (b0 b1 of 4 lanes, then b2 b3),
// the nibbles looked up as bf16 low and high bytes, and the bytes interleaved back into words,
// so that unpacklo gives the lanes' (b0, b1) words and unpackhi their (b2, b3) words: out[q] is
// pair vector q of the chunk (q = 0, 1 from the low nibbles, 2, 3 from the high ones).
// With kE2M1Doubled the words are the weights' int16 2 * e2m1 (the exact blocks).
template <const auto& kWords>
struct Fp4WordDecoder {
  __m256i lo_bytes = simd::load_table(kWordBytes<0, kWords>),
          hi_bytes = simd::load_table(kWordBytes<8, kWords>);
  __m256i pairs_first = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1,
                                         4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  __m256i nibble = _mm256_set1_epi8(0x0F);
  void operator()(const uint8_t* src, __m256i out[4]) const {
    const __m256i raw =
        _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), pairs_first);
    const __m256i codes[2] = {_mm256_and_si256(raw, nibble),
                              _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble)};
    for (int n = 0; n < 2; ++n) {
      const __m256i lo = _mm256_shuffle_epi8(lo_bytes, codes[n]);
      const __m256i hi = _mm256_shuffle_epi8(hi_bytes, codes[n]);
      out[2 * n] = _mm256_unpacklo_epi8(lo, hi);
      out[2 * n + 1] = _mm256_unpackhi_epi8(lo, hi);
    }
  }
};

using Fp4Bf16Decoder = Fp4WordDecoder<kE2M1Bf16>;
using Fp4Int16Decoder = Fp4WordDecoder<kE2M1Doubled>;

void decode_fp4_bf16_panel_avx2(const uint8_t* prepared, int64_t chunks, uint16_t* panel) {
  const Fp4Bf16Decoder decode;
  for (int64_t j = 0; j < chunks; ++j) {
    __m256i* dst = reinterpret_cast<__m256i*>(panel + j * 128);
    for (int h = 0; h < 2; ++h) {  // lanes 8h .. 8h + 7
      __m256i v[4];
      decode(prepared + j * 64 + h * 32, v);
      for (int q = 0; q < 4; ++q) _mm256_storeu_si256(dst + q * 2 + h, v[q]);
    }
  }
}

static_assert(kTileRows <= kExactMaxRows, "the direct tiles read the exact blocks' form");

// Whether block kb of rows 0..R-1 (tile 0) is exact in every row (QkvActivations::exact_scale).
template <int R>
bool exact_rows(const QkvProblem& p, int64_t kb) {
  if (p.a.exact_scale == nullptr) return false;
  for (int r = 0; r < R; ++r) {
    if (p.a.exact_scale[kb * kRowTile + r] == 0.0f) return false;
  }
  return true;
}

// Blocks kb, kb + 1, ... of rows 0..R-1 as long as every row's block is exact (at least block
// kb): t = float(sum of the int16 products in int32) * the block's power of two, the canonical
// order's t bit for bit (see prepare_bf16_activations), then the same apply_block. One pmaddwd
// per pair vector and row instead of two fma, and no bf16 odd / even split. Returns the first
// block it did not run. Out of line, with an empty asm on each sum after its add: else GCC
// reassociates the integer adds into trees of products parked on the stack (as in
// qkv_fp4_avx2.cpp).
template <int R, int kPairsPerBlock>
[[gnu::noinline]] int64_t fp4_int16_blocks(const QkvProblem& p, const uint8_t* prepared,
                                           const uint16_t* wscale, DirectPrefetch ahead, int64_t kb,
                                           float* tile) {
  constexpr int kChunks = kPairsPerBlock / 4;
  constexpr int kBlockBytes = 2 * kChunks * kFp4ChunkBytes;  // both halves
  const Fp4Int16Decoder decode;
  do {
    ahead.at(kb, kBlockBytes);
    const uint8_t* w = prepared + kb * kBlockBytes;
    const uint32_t* u = p.a.exact_units + kb * kPairsPerBlock * kRowTile;
    for (int half = 0; half < 2; ++half) {
      __m256i s[R][2];
      for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm256_setzero_si256();
      for (int j = 0; j < kChunks; ++j) {
        __m256i v[2][4];  // [lanes 8h ..][pair vector q]: int16 (even, odd) per lane
        decode(w + (half * kChunks + j) * kFp4ChunkBytes, v[0]);
        decode(w + (half * kChunks + j) * kFp4ChunkBytes + 32, v[1]);
        for (int q = 0; q < 4; ++q) {
          for (int r = 0; r < R; ++r) {
            const __m256i unit = _mm256_set1_epi32(int32_t(u[(4 * j + q) * kRowTile + r]));
            for (int h = 0; h < 2; ++h) {
              s[r][h] = _mm256_add_epi32(s[r][h], _mm256_madd_epi16(v[h][q], unit));
              __asm__("" : "+x"(s[r][h]));
            }
          }
        }
      }
      const __m256 sb0 = simd::load_bf16_as_f32(wscale + kb * kPairCols + half * kHalfCols);
      const __m256 sb1 = simd::load_bf16_as_f32(wscale + kb * kPairCols + half * kHalfCols + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 e = _mm256_set1_ps(p.a.exact_scale[kb * kRowTile + r]);
        const float sa = p.a.scale[kb * kRowTile + r];
        apply_block(_mm256_mul_ps(_mm256_cvtepi32_ps(s[r][0]), e), sa, sb0,
                    tile + r * kPairCols + half * kHalfCols);
        apply_block(_mm256_mul_ps(_mm256_cvtepi32_ps(s[r][1]), e), sa, sb1,
                    tile + r * kPairCols + half * kHalfCols + 8);
      }
    }
    ++kb;
  } while (kb < p.kb_count && exact_rows<R>(p, kb));
  return kb;
}

// Decode-sized M (one tile of at most kTileRows rows), weight-only fp4: the prepared weight is
// widened in registers chunk by chunk, so it is read once from memory (prefetched
// kDirectPrefetchBlocks ahead) and no panel is written or read back. Same steps per lane as
// mxfp8_half_tile, same bits.
template <int R, int kPairsPerBlock>
void fp4_bf16_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                          DirectPrefetch ahead, float* tile) {
  constexpr int kChunks = kPairsPerBlock / 4;  // 64-byte chunks per half and block
  constexpr int kHalfBytes = kChunks * kFp4ChunkBytes;
  const Fp4Bf16Decoder decode;
  zero_tile_rows<R>(tile);
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    if (exact_rows<R>(p, kb)) {
      kb = fp4_int16_blocks<R, kPairsPerBlock>(p, prepared, wscale, ahead, kb, tile) - 1;
      continue;
    }
    ahead.at(kb, 2 * kHalfBytes);
    const uint32_t* u = p.a.units + kb * kPairsPerBlock * kRowTile;  // tile 0: rows 0..R-1
    for (int half = 0; half < 2; ++half) {
      const uint8_t* w = prepared + (kb * 2 + half) * kHalfBytes;
      __m256 t[R][2];
      for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm256_setzero_ps();
      for (int j = 0; j < kChunks; ++j) {
        __m256i v[2][4];  // [lanes 8h ..][pair vector q]
        decode(w + j * kFp4ChunkBytes, v[0]);
        decode(w + j * kFp4ChunkBytes + 32, v[1]);
        for (int q = 0; q < 4; ++q) {
          __m256 w_odd[2], w_even[2];
          for (int h = 0; h < 2; ++h) {
            w_odd[h] = simd::bf16_pair_odd(v[h][q]);
            w_even[h] = simd::bf16_pair_even(v[h][q]);
          }
          for (int r = 0; r < R; ++r) {
            const __m256i unit = _mm256_set1_epi32(int32_t(u[(4 * j + q) * kRowTile + r]));
            const __m256 a_odd = simd::bf16_pair_odd(unit);
            const __m256 a_even = simd::bf16_pair_even(unit);
            for (int h = 0; h < 2; ++h) {
              t[r][h] = _mm256_fmadd_ps(a_odd, w_odd[h], t[r][h]);
              t[r][h] = _mm256_fmadd_ps(a_even, w_even[h], t[r][h]);
            }
          }
        }
      }
      const __m256 sb0 = simd::load_bf16_as_f32(wscale + kb * kPairCols + half * kHalfCols);
      const __m256 sb1 = simd::load_bf16_as_f32(wscale + kb * kPairCols + half * kHalfCols + 8);
      for (int r = 0; r < R; ++r) {
        const float s = p.a.scale[kb * kRowTile + r];
        apply_block(t[r][0], s, sb0, tile + r * kPairCols + half * kHalfCols);
        apply_block(t[r][1], s, sb1, tile + r * kPairCols + half * kHalfCols + 8);
      }
    }
  }
}

// Decode-sized M (at most kTileRows rows, in tiles of kDirectRows), MXFP8: the prepared e4m3
// weight is decoded in registers pair vector by pair vector (E4m3Bf16Decoder), so it is read
// once from memory (prefetched kDirectPrefetchBlocks ahead) and no bf16 panel is written or
// read back. Both halves of a block in one pass: four independent fma chains a row instead of
// two (each chain is the canonical order's sequence, two dependent fma per pair vector), and
// one activation split per pair vector for both. Same steps per lane as mxfp8_half_tile, same
// bits.
constexpr int kDirectRows = 2;
template <int R>
void mxfp8_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                       int64_t m0, DirectPrefetch ahead, float* tile) {
  constexpr int kPairsPerBlock = 16;               // SFV 32
  constexpr int kHalfBytes = kPairsPerBlock * 32;  // [pv][16 columns x 2 k]
  const simd::E4m3Bf16Decoder decode;
  zero_tile_rows<R>(tile);
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    ahead.at(kb, 2 * kHalfBytes);
    // Rows m0.. of activation tile 0 (M <= kTileRows <= kRowTile).
    const uint32_t* u = p.a.units + kb * kPairsPerBlock * kRowTile + m0;
    const uint8_t* w = prepared + kb * 2 * kHalfBytes;
    __m256 t[R][4];  // [row][half * 2 + words index]: columns as E4m3Bf16Decoder gives them
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = t[r][2] = t[r][3] = _mm256_setzero_ps();
    for (int pv = 0; pv < kPairsPerBlock; ++pv) {
      __m256 w_odd[4], w_even[4];
      for (int half = 0; half < 2; ++half) {
        __m256i words[2];
        decode(w + half * kHalfBytes + pv * 32, words);
        for (int h = 0; h < 2; ++h) {
          w_odd[half * 2 + h] = simd::bf16_pair_odd(words[h]);
          w_even[half * 2 + h] = simd::bf16_pair_even(words[h]);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256i unit = _mm256_set1_epi32(int32_t(u[pv * kRowTile + r]));
        const __m256 a_odd = simd::bf16_pair_odd(unit);
        const __m256 a_even = simd::bf16_pair_even(unit);
        for (int q = 0; q < 4; ++q) {
          t[r][q] = _mm256_fmadd_ps(a_odd, w_odd[q], t[r][q]);
          t[r][q] = _mm256_fmadd_ps(a_even, w_even[q], t[r][q]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float s = p.a.scale[kb * kRowTile + m0 + r];
      for (int half = 0; half < 2; ++half) {
        __m256 sums[2];  // columns 16 half + 0..7, + 8..15
        simd::E4m3Bf16Decoder::columns_in_order(t[r][half * 2], t[r][half * 2 + 1], sums);
        for (int h = 0; h < 2; ++h) {
          const int c = half * kHalfCols + h * 8;
          apply_block(sums[h], s, simd::load_bf16_as_f32(wscale + kb * kPairCols + c),
                      tile + r * kPairCols + c);
        }
      }
    }
  }
}

// The row tiles over a decoded bf16 panel [kb][half][SFV/2 pairs][32] whose weight scales
// follow it as fp32 [kb][32] (after the MXFP8-sized code area, which a weight-only fp4 panel
// of SFV/2 pairs per block fills too).
void bf16_panel_tiles(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  const uint16_t* bf16_panel = reinterpret_cast<const uint16_t*>(panel);
  float* sb = reinterpret_cast<float*>(panel + qkv_panel_code_bytes(BlockFormat::kMXFP8, p.k));
  simd::widen_bf16_aligned(prepared_pair_scales(p, pair), p.kb_count * kPairCols, sb);
  for_each_row_tile<kTileRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    for (int half = 0; half < 2; ++half) {
      with_static_count<kTileRows>(
          rows, [&](auto r) { mxfp8_half_tile<r>(p, bf16_panel, sb, m0, half, tile); });
    }
  });
}

}  // namespace

void qkv_mxfp8_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  if (p.m <= kTileRows) {
    const uint8_t* prepared = prepared_pair_data(p, pair);
    const uint16_t* wscale = prepared_pair_scales(p, pair);
    // The first tile streams the weight from memory behind its prefetches, the second (rows
    // 2..3) from L2.
    const DirectPrefetch stream = DirectPrefetch::of(p, pair);
    for_each_row_tile<kDirectRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
      const DirectPrefetch ahead = m0 == 0 ? stream : DirectPrefetch{};
      with_static_count<kDirectRows>(
          rows, [&](auto r) { mxfp8_tile_direct<r>(p, prepared, wscale, m0, ahead, tile); });
    });
    return;
  }
  convert_e4m3_to_bf16_avx2(prepared_pair_data(p, pair), reinterpret_cast<uint16_t*>(panel),
                            p.k * kPairCols);
  bf16_panel_tiles(p, pair, panel);
}

void qkv_fp4_bf16_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  if (p.m <= kTileRows) {
    const uint8_t* prepared = prepared_pair_data(p, pair);
    const uint16_t* wscale = prepared_pair_scales(p, pair);
    const DirectPrefetch ahead = DirectPrefetch::of(p, pair);
    for_each_row_tile<kTileRows>(p, pair, [&](int64_t, int rows, float* tile) {
      with_static_count<kTileRows>(rows, [&](auto r) {
        if (p.sfv == 16) {
          fp4_bf16_tile_direct<r, 8>(p, prepared, wscale, ahead, tile);
        } else {
          fp4_bf16_tile_direct<r, 16>(p, prepared, wscale, ahead, tile);
        }
      });
    });
    return;
  }
  decode_fp4_bf16_panel_avx2(prepared_pair_data(p, pair), p.k * kPairCols / 128,
                             reinterpret_cast<uint16_t*>(panel));
  bf16_panel_tiles(p, pair, panel);
}

}  // namespace quantkv::cpu
