// AVX2 pair kernel of the fused QKV projection for NVFP4 / MXFP4: the same decoded panel as the
// AVX-512 kernel, with pmaddubsw (unsigned panel bytes x signed activation codes; |sum of two|
// <= 576, so it never saturates) and pmaddwd to reach the exact int32 block dot products.
#include <immintrin.h>

#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx2.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kTileRows = 2;

void decode_fp4_panel_avx2(const uint8_t* prepared, int64_t chunks, uint8_t* panel) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedDoubledE2M1)));
  const __m256i nib = _mm256_set1_epi8(0x0F);
  for (int64_t j = 0; j < chunks * 2; ++j) {  // 32-byte halves of the 64-byte chunks
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(prepared + j * 32));
    const __m256i lo = _mm256_and_si256(v, nib);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
    uint8_t* dst = panel + (j / 2) * 128 + (j % 2) * 32;
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_shuffle_epi8(table, lo));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 64), _mm256_shuffle_epi8(table, hi));
  }
}

// Rows [m0, m0 + R) x the 16 columns of `half`; G = SFV / 4.
template <int R, int G>
void fp4_half_tile(const QkvProblem& p, const uint8_t* panel, const uint16_t* wscale, int64_t m0,
                   int half, float* tile) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = panel + (kb * 2 + half) * G * 64;
    __m256i blk[R][2];
    for (int r = 0; r < R; ++r) {
      blk[r][0] = blk[r][1] = _mm256_set1_epi32(p.a.corr[act_block_index(p, m0 + r, kb)]);
    }
    for (int g = 0; g < G; ++g) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + g * 64));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + g * 64 + 32));
      for (int r = 0; r < R; ++r) {
        const __m256i a = _mm256_set1_epi32(int32_t(p.a.units[act_unit_index(p, m0 + r, kb, g)]));
        blk[r][0] = _mm256_add_epi32(blk[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, a), ones));
        blk[r][1] = _mm256_add_epi32(blk[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, a), ones));
      }
    }
    const __m256 sb0 = simd::load_bf16_as_f32(wscale + (kb * 2 + half) * 16);
    const __m256 sb1 = simd::load_bf16_as_f32(wscale + (kb * 2 + half) * 16 + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(p.a.scale[act_block_index(p, m0 + r, kb)]);
      acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[r][0]), _mm256_mul_ps(s, sb0), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[r][1]), _mm256_mul_ps(s, sb1), acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(tile + r * kPairCols + half * 16, acc[r][0]);
    _mm256_storeu_ps(tile + r * kPairCols + half * 16 + 8, acc[r][1]);
  }
}

// Decode-sized M (one row tile): the prepared chunks are decoded in registers, so the weight
// is read once from memory and no panel is written; the integer sums are the same (exact).
template <int R, int G>
void fp4_half_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                          int half, float* tile) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kBiasedDoubledE2M1)));
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  constexpr int kChunks = G / 2;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = prepared + ((kb * 2 + half) * kChunks) * 64;
    __m256i blk[R][2];
    for (int r = 0; r < R; ++r) {
      blk[r][0] = blk[r][1] = _mm256_set1_epi32(p.a.corr[act_block_index(p, r, kb)]);
    }
    for (int j = 0; j < kChunks; ++j) {
      for (int h = 0; h < 2; ++h) {  // lanes 0-7, 8-15 of the half
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * 64 + h * 32));
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, nib));
        const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
        for (int r = 0; r < R; ++r) {
          const __m256i a_lo = _mm256_set1_epi32(int32_t(p.a.units[act_unit_index(p, r, kb, 2 * j)]));
          const __m256i a_hi = _mm256_set1_epi32(int32_t(p.a.units[act_unit_index(p, r, kb, 2 * j + 1)]));
          const __m256i d = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), ones),
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi), ones));
          blk[r][h] = _mm256_add_epi32(blk[r][h], d);
        }
      }
    }
    const __m256 sb0 = simd::load_bf16_as_f32(wscale + (kb * 2 + half) * 16);
    const __m256 sb1 = simd::load_bf16_as_f32(wscale + (kb * 2 + half) * 16 + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(p.a.scale[act_block_index(p, r, kb)]);
      acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[r][0]), _mm256_mul_ps(s, sb0), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[r][1]), _mm256_mul_ps(s, sb1), acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(tile + r * kPairCols + half * 16, acc[r][0]);
    _mm256_storeu_ps(tile + r * kPairCols + half * 16 + 8, acc[r][1]);
  }
}

template <int G>
void fp4_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale, int rows,
                float* tile) {
  for (int half = 0; half < 2; ++half) {
    if (rows == 2) {
      fp4_half_tile_direct<2, G>(p, prepared, wscale, half, tile);
    } else {
      fp4_half_tile_direct<1, G>(p, prepared, wscale, half, tile);
    }
  }
}

template <int G>
void fp4_rows(const QkvProblem& p, const uint8_t* panel, const uint16_t* wscale, int64_t m0,
              int rows, float* tile) {
  for (int half = 0; half < 2; ++half) {
    if (rows == 2) {
      fp4_half_tile<2, G>(p, panel, wscale, m0, half, tile);
    } else {
      fp4_half_tile<1, G>(p, panel, wscale, m0, half, tile);
    }
  }
}

}  // namespace

void qkv_fp4_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  const uint8_t* prepared = prepared_pair_data(p, pair);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  alignas(32) float tile[kTileRows * kPairCols];
  const int64_t n0 = pair * kPairCols;
  const int cols = int(p.epi.n - n0 < kPairCols ? p.epi.n - n0 : kPairCols);
  if (p.m <= kTileRows) {
    if (p.sfv == 16) {
      fp4_direct<4>(p, prepared, wscale, int(p.m), tile);
    } else {
      fp4_direct<8>(p, prepared, wscale, int(p.m), tile);
    }
    store_qkv_tile(p.epi, 0, int(p.m), n0, cols, tile, kPairCols);
    return;
  }
  decode_fp4_panel_avx2(prepared, p.k * kPairCols / 128, panel);
  for (int64_t m0 = 0; m0 < p.m; m0 += kTileRows) {
    const int rows = int(p.m - m0 < kTileRows ? p.m - m0 : kTileRows);
    if (p.sfv == 16) {
      fp4_rows<4>(p, panel, wscale, m0, rows, tile);
    } else {
      fp4_rows<8>(p, panel, wscale, m0, rows, tile);
    }
    store_qkv_tile(p.epi, m0, rows, n0, cols, tile, kPairCols);
  }
}

}  // namespace quantkv::cpu
