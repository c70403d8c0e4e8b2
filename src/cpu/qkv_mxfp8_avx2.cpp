// AVX2 pair kernel of the fused QKV projection for MXFP8. No bf16 dot product here: the bf16
// panel's pairs are split into their odd and even halves (exact fp32) and each block sum is
// replayed with fma in the vdpbf16ps lane order, t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p]
// (products of e4m3 values are exact, so fma rounds exactly like the add).
#include <immintrin.h>

#include "cpu/convert_kernels.hpp"
#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx2.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kTileRows = 2;
constexpr int kPairsPerBlock = 16;

template <int R>
void mxfp8_half_tile(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale,
                     int64_t m0, int half, float* tile) {
  const __m256i hi_mask = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint16_t* w = panel + (kb * 2 + half) * kPairsPerBlock * 32;
    __m256 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm256_setzero_ps();
    for (int pv = 0; pv < kPairsPerBlock; ++pv) {
      __m256 w_odd[2], w_even[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + pv * 32 + h * 16));
        w_odd[h] = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
        w_even[h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      }
      for (int r = 0; r < R; ++r) {
        const uint32_t unit = p.a.units[act_unit_index(p, m0 + r, kb, pv)];
        const __m256 a_odd = _mm256_set1_ps(bf16_bits_to_float(uint16_t(unit >> 16)));
        const __m256 a_even = _mm256_set1_ps(bf16_bits_to_float(uint16_t(unit)));
        for (int h = 0; h < 2; ++h) {
          t[r][h] = _mm256_fmadd_ps(a_odd, w_odd[h], t[r][h]);
          t[r][h] = _mm256_fmadd_ps(a_even, w_even[h], t[r][h]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(p.a.scale[act_block_index(p, m0 + r, kb)]);
      for (int h = 0; h < 2; ++h) {
        const __m256 sb = simd::load_bf16_as_f32(wscale + (kb * 2 + half) * 16 + h * 8);
        acc[r][h] = _mm256_fmadd_ps(t[r][h], _mm256_mul_ps(s, sb), acc[r][h]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(tile + r * kPairCols + half * 16, acc[r][0]);
    _mm256_storeu_ps(tile + r * kPairCols + half * 16 + 8, acc[r][1]);
  }
}

}  // namespace

void qkv_mxfp8_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  convert_e4m3_to_bf16_avx2(prepared_pair_data(p, pair), bf16_panel, p.k * kPairCols);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  alignas(32) float tile[kTileRows * kPairCols];
  const int64_t n0 = pair * kPairCols;
  const int cols = int(p.epi.n - n0 < kPairCols ? p.epi.n - n0 : kPairCols);
  for (int64_t m0 = 0; m0 < p.m; m0 += kTileRows) {
    const int rows = int(p.m - m0 < kTileRows ? p.m - m0 : kTileRows);
    for (int half = 0; half < 2; ++half) {
      if (rows == 2) {
        mxfp8_half_tile<2>(p, bf16_panel, wscale, m0, half, tile);
      } else {
        mxfp8_half_tile<1>(p, bf16_panel, wscale, m0, half, tile);
      }
    }
    store_qkv_tile(p.epi, m0, rows, n0, cols, tile, kPairCols);
  }
}

}  // namespace quantkv::cpu
