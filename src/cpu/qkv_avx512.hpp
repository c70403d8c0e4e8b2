// Internal: the register-tile steps the AVX-512 pair kernels of the fused QKV projection share
// (qkv_fp4_avx512.cpp, qkv_mxfp8_avx512.cpp): a block's scales applied to a tile of R rows x
// 32 columns, and the tile's store. Include only from files compiled with the AVX-512 flags
// (internal linkage: see qkv_kernels.hpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

// acc = fma(t, fl(sa * sb), acc) for one block of both halves (sa per row, sb per column).
template <int R>
inline void apply_block_scales(const uint16_t* wscale_kb, const float* sa_kb,
                               const __m512 (&t)[R][2], __m512 (&acc)[R][2]) {
  const __m512 sb0 = simd::load_bf16_as_f32(wscale_kb);
  const __m512 sb1 = simd::load_bf16_as_f32(wscale_kb + 16);
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(sa_kb[r]);
    acc[r][0] = _mm512_fmadd_ps(t[r][0], _mm512_mul_ps(s, sb0), acc[r][0]);
    acc[r][1] = _mm512_fmadd_ps(t[r][1], _mm512_mul_ps(s, sb1), acc[r][1]);
  }
}

// The same where every sa is 1 (QkvActivations::unit_scale): fl(1 * sb) = sb, so one fma per
// row and half, the same bits.
template <int R>
inline void apply_unit_block_scales(const uint16_t* wscale_kb, const __m512 (&t)[R][2],
                                    __m512 (&acc)[R][2]) {
  const __m512 sb0 = simd::load_bf16_as_f32(wscale_kb);
  const __m512 sb1 = simd::load_bf16_as_f32(wscale_kb + 16);
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_fmadd_ps(t[r][0], sb0, acc[r][0]);
    acc[r][1] = _mm512_fmadd_ps(t[r][1], sb1, acc[r][1]);
  }
}

template <int R>
inline void store_rows(const __m512 (&acc)[R][2], float* tile) {
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(tile + r * kPairCols, acc[r][0]);
    _mm512_storeu_ps(tile + r * kPairCols + 16, acc[r][1]);
  }
}

// The same for exact integer block sums (the fp4 kernels): t = float(blk).
template <int R>
inline void apply_block_scales(const uint16_t* wscale_kb, const float* sa_kb,
                               const __m512i (&blk)[R][2], __m512 (&acc)[R][2]) {
  __m512 t[R][2];
  for (int r = 0; r < R; ++r) {
    t[r][0] = _mm512_cvtepi32_ps(blk[r][0]);
    t[r][1] = _mm512_cvtepi32_ps(blk[r][1]);
  }
  apply_block_scales<R>(wscale_kb, sa_kb, t, acc);
}

}  // namespace
}  // namespace quantkv::cpu
