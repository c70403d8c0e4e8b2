// AVX-512 BF16 pair kernel of the fused QKV projection for MXFP8.
//
// e4m3 is exact in bf16, so the pair's prepared e4m3 weight is widened once per call into a
// bf16 panel (16 columns x 2 k per vector) and vdpbf16ps accumulates each 32-value block into
// a block sum that starts at zero: per lane t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p], every
// product exact, every sum rounded to nearest even — the order the scalar kernels replay.
// DAZ/FTZ of vdpbf16ps never matter here: products of e4m3 values are >= 2^-18 and every
// partial sum is a multiple of 2^-18. One fma per block applies the e8m0 scales.
#include <immintrin.h>

#include <cstring>

#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kTileRows = kRowTile;
// P, the bf16 pairs per scale block: 16 for MXFP8 (and weight-only MXFP4), 8 for a
// weight-only NVFP4 weight.

// 32 e4m3 bytes at src -> 32 bf16 with the one AVX-512 decoder; the table stays in a register.
struct E4m3Decoder {
  __m512i subnormals = simd::e4m3_subnormal_bf16_table();
  __m512i operator()(const uint8_t* src) const {
    return simd::e4m3_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), subnormals);
  }
};

void decode_mxfp8_panel_avx512(const uint8_t* src, uint16_t* dst, int64_t n) {
  const E4m3Decoder decode;
  for (int64_t i = 0; i < n; i += 32) _mm512_store_si512(dst + i, decode(src + i));
}

// acc = fma(t, sa * sb, acc) for one block of both halves (sa per row, sb per column).
template <int R>
inline void apply_block_scales(const uint16_t* wscale_kb, const float* sa_kb, const __m512 (&t)[R][2],
                               __m512 (&acc)[R][2]) {
  const __m512 sb0 = simd::load_bf16_as_f32(wscale_kb);
  const __m512 sb1 = simd::load_bf16_as_f32(wscale_kb + 16);
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(sa_kb[r]);
    acc[r][0] = _mm512_fmadd_ps(t[r][0], _mm512_mul_ps(s, sb0), acc[r][0]);
    acc[r][1] = _mm512_fmadd_ps(t[r][1], _mm512_mul_ps(s, sb1), acc[r][1]);
  }
}

template <int R>
inline void store_rows(const __m512 (&acc)[R][2], float* tile) {
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(tile + r * kPairCols, acc[r][0]);
    _mm512_storeu_ps(tile + r * kPairCols + 16, acc[r][1]);
  }
}

template <int R, int kPairsPerBlock>
void mxfp8_tile(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale, int64_t m0,
                float* tile) {
  static_assert(R <= kRowTile, "a register tile lies within one activation tile");
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int64_t tile_idx = m0 / kRowTile;
  const uint32_t* units = p.a.units + tile_idx * p.kb_count * kPairsPerBlock * kRowTile;
  const float* sa = p.a.scale + tile_idx * p.kb_count * kRowTile;
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint16_t* w = panel + kb * 2 * kPairsPerBlock * 32;
    const uint32_t* u = units + kb * kPairsPerBlock * kRowTile;
    __m512 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
    for (int pv = 0; pv < kPairsPerBlock; ++pv) {
      const __m512bh w0 = (__m512bh)_mm512_load_si512(w + pv * 32);
      const __m512bh w1 = (__m512bh)_mm512_load_si512(w + (kPairsPerBlock + pv) * 32);
      for (int r = 0; r < R; ++r) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(u[pv * kRowTile + r]));
        t[r][0] = _mm512_dpbf16_ps(t[r][0], w0, a);
        t[r][1] = _mm512_dpbf16_ps(t[r][1], w1, a);
      }
    }
    apply_block_scales<R>(wscale + kb * 32, sa + kb * kRowTile, t, acc);
  }
  store_rows<R>(acc, tile);
}

// Decode-sized M (one row tile): the prepared e4m3 bytes are widened in registers, so the
// weight is read once from memory and no panel is written. Same order, same bits.
template <int R>
void mxfp8_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                       float* tile) {
  constexpr int kPairsPerBlock = 16;
  const E4m3Decoder decode;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = prepared + kb * 2 * kPairsPerBlock * 32;
    const uint32_t* u = p.a.units + kb * kPairsPerBlock * kRowTile;  // tile 0: rows 0..R-1
    __m512 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
    for (int pv = 0; pv < kPairsPerBlock; ++pv) {
      _mm_prefetch(reinterpret_cast<const char*>(w + pv * 32 + 4096), _MM_HINT_T0);
      const __m512bh w0 = (__m512bh)decode(w + pv * 32);
      const __m512bh w1 = (__m512bh)decode(w + (kPairsPerBlock + pv) * 32);
      for (int r = 0; r < R; ++r) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(u[pv * kRowTile + r]));
        t[r][0] = _mm512_dpbf16_ps(t[r][0], w0, a);
        t[r][1] = _mm512_dpbf16_ps(t[r][1], w1, a);
      }
    }
    apply_block_scales<R>(wscale + kb * 32, p.a.scale + kb * kRowTile, t, acc);
  }
  store_rows<R>(acc, tile);
}

void mxfp8_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale, int rows,
                  float* tile) {
  switch (rows) {
    case 6: mxfp8_tile_direct<6>(p, prepared, wscale, tile); break;
    case 5: mxfp8_tile_direct<5>(p, prepared, wscale, tile); break;
    case 4: mxfp8_tile_direct<4>(p, prepared, wscale, tile); break;
    case 3: mxfp8_tile_direct<3>(p, prepared, wscale, tile); break;
    case 2: mxfp8_tile_direct<2>(p, prepared, wscale, tile); break;
    default: mxfp8_tile_direct<1>(p, prepared, wscale, tile); break;
  }
}

template <int P>
void mxfp8_rows(const QkvProblem& p, const uint16_t* panel, const uint16_t* wscale, int64_t m0,
                int rows, float* tile) {
  switch (rows) {
    case 6: mxfp8_tile<6, P>(p, panel, wscale, m0, tile); break;
    case 5: mxfp8_tile<5, P>(p, panel, wscale, m0, tile); break;
    case 4: mxfp8_tile<4, P>(p, panel, wscale, m0, tile); break;
    case 3: mxfp8_tile<3, P>(p, panel, wscale, m0, tile); break;
    case 2: mxfp8_tile<2, P>(p, panel, wscale, m0, tile); break;
    default: mxfp8_tile<1, P>(p, panel, wscale, m0, tile); break;
  }
}

// One 64-byte chunk of the prepared fp4 weight (16 lanes x 8 k) -> its four bf16 pair
// vectors (see decode_fp4_bf16_panel_scalar): the even and odd 16-bit words of each lane
// widened to one byte per word, then each nibble through a vpermw table.
struct Fp4ToBf16 {
  __m512i table;
  Fp4ToBf16() { table = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kE2M1Bf16))); }
  void operator()(const uint8_t* chunk, __m512i out[4]) const {
    const __m512i v = _mm512_loadu_si512(chunk);
    const __m512i b01 = _mm512_cvtepu8_epi16(_mm512_cvtepi32_epi16(v));
    const __m512i b23 = _mm512_cvtepu8_epi16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    const __m512i low = _mm512_set1_epi16(0x0F);
    out[0] = _mm512_permutexvar_epi16(_mm512_and_si512(b01, low), table);
    out[1] = _mm512_permutexvar_epi16(_mm512_and_si512(b23, low), table);
    out[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b01, 4), table);
    out[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b23, 4), table);
  }
};

void decode_fp4_bf16_panel_avx512(const uint8_t* prepared, uint16_t* dst, int64_t chunks) {
  const Fp4ToBf16 decode;
  for (int64_t j = 0; j < chunks; ++j) {
    __m512i v[4];
    decode(prepared + j * 64, v);
    for (int q = 0; q < 4; ++q) _mm512_store_si512(dst + j * 128 + q * 32, v[q]);
  }
}

// Decode-sized M on a weight-only fp4 weight: each chunk is widened in registers (the
// weight is read once, no panel written). Same order as the panel tiles, same bits.
template <int R, int kPairsPerBlock>
void fp4_bf16_tile_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                          float* tile) {
  constexpr int kChunks = kPairsPerBlock / 4;  // per half and block
  const Fp4ToBf16 decode;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < p.kb_count; ++kb) {
    const uint8_t* w = prepared + kb * 2 * kChunks * 64;
    const uint32_t* u = p.a.units + kb * kPairsPerBlock * kRowTile;  // tile 0: rows 0..R-1
    __m512 t[R][2];
    for (int r = 0; r < R; ++r) t[r][0] = t[r][1] = _mm512_setzero_ps();
    for (int j = 0; j < kChunks; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(w + j * 64 + 2048), _MM_HINT_T0);
      __m512i w0[4], w1[4];
      decode(w + j * 64, w0);
      decode(w + (kChunks + j) * 64, w1);
      for (int q = 0; q < 4; ++q) {
        for (int r = 0; r < R; ++r) {
          const __m512bh a = (__m512bh)_mm512_set1_epi32(int32_t(u[(4 * j + q) * kRowTile + r]));
          t[r][0] = _mm512_dpbf16_ps(t[r][0], (__m512bh)w0[q], a);
          t[r][1] = _mm512_dpbf16_ps(t[r][1], (__m512bh)w1[q], a);
        }
      }
    }
    apply_block_scales<R>(wscale + kb * 32, p.a.scale + kb * kRowTile, t, acc);
  }
  store_rows<R>(acc, tile);
}

template <int P>
void fp4_bf16_direct(const QkvProblem& p, const uint8_t* prepared, const uint16_t* wscale,
                     int rows, float* tile) {
  switch (rows) {
    case 6: fp4_bf16_tile_direct<6, P>(p, prepared, wscale, tile); break;
    case 5: fp4_bf16_tile_direct<5, P>(p, prepared, wscale, tile); break;
    case 4: fp4_bf16_tile_direct<4, P>(p, prepared, wscale, tile); break;
    case 3: fp4_bf16_tile_direct<3, P>(p, prepared, wscale, tile); break;
    case 2: fp4_bf16_tile_direct<2, P>(p, prepared, wscale, tile); break;
    default: fp4_bf16_tile_direct<1, P>(p, prepared, wscale, tile); break;
  }
}

}  // namespace

bool mxfp8_avx512_matches_canonical_order() {
  // Random e4m3 values as bf16 and random partial sums; the canonical step
  // t = (t + a_odd b_odd) + a_even b_even is replayed in scalar fp32. A CPU whose vdpbf16ps
  // rounds in another order (or fuses the two products) fails within a few lanes.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(state >> 33);
  };
  for (int v = 0; v < 64; ++v) {
    alignas(64) uint16_t a[32], b[32];
    alignas(64) float t[16], got[16];
    for (int i = 0; i < 32; ++i) {
      uint8_t ca = uint8_t(next()), cb = uint8_t(next());
      if ((ca & 0x7F) == 0x7F) ca = 0x7E;
      if ((cb & 0x7F) == 0x7F) cb = 0x7E;
      a[i] = e4m3_to_bf16_bits(ca);
      b[i] = e4m3_to_bf16_bits(cb);
    }
    for (int l = 0; l < 16; ++l) t[l] = float(int32_t(next() % 2000001) - 1000000) * 0x1p-7f;
    _mm512_store_ps(got, _mm512_dpbf16_ps(_mm512_load_ps(t), (__m512bh)_mm512_load_si512(a),
                                          (__m512bh)_mm512_load_si512(b)));
    for (int l = 0; l < 16; ++l) {
      float want = t[l] + bf16_bits_to_float(a[2 * l + 1]) * bf16_bits_to_float(b[2 * l + 1]);
      want = want + bf16_bits_to_float(a[2 * l]) * bf16_bits_to_float(b[2 * l]);
      if (std::memcmp(&want, &got[l], 4) != 0) return false;
    }
  }
  return true;
}

void qkv_mxfp8_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  const uint8_t* prepared = prepared_pair_data(p, pair);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  alignas(64) float tile[kTileRows * kPairCols];
  const int64_t n0 = pair * kPairCols;
  const int cols = int(p.epi.n - n0 < kPairCols ? p.epi.n - n0 : kPairCols);
  if (p.m <= kTileRows) {
    mxfp8_direct(p, prepared, wscale, int(p.m), tile);
    store_qkv_tile(p.epi, 0, int(p.m), n0, cols, tile, kPairCols);
    return;
  }
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  decode_mxfp8_panel_avx512(prepared, bf16_panel, p.k * kPairCols);
  for (int64_t m0 = 0; m0 < p.m; m0 += kTileRows) {
    const int rows = int(p.m - m0 < kTileRows ? p.m - m0 : kTileRows);
    mxfp8_rows<16>(p, bf16_panel, wscale, m0, rows, tile);
    store_qkv_tile(p.epi, m0, rows, n0, cols, tile, kPairCols);
  }
}

namespace {
// Weight-only on an fp4 weight: P = SFV / 2 bf16 pairs per scale block.
template <int P>
void fp4_bf16_pair(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  const uint8_t* prepared = prepared_pair_data(p, pair);
  const uint16_t* wscale = prepared_pair_scales(p, pair);
  alignas(64) float tile[kTileRows * kPairCols];
  const int64_t n0 = pair * kPairCols;
  const int cols = int(p.epi.n - n0 < kPairCols ? p.epi.n - n0 : kPairCols);
  if (p.m <= kTileRows) {
    fp4_bf16_direct<P>(p, prepared, wscale, int(p.m), tile);
    store_qkv_tile(p.epi, 0, int(p.m), n0, cols, tile, kPairCols);
    return;
  }
  uint16_t* bf16_panel = reinterpret_cast<uint16_t*>(panel);
  decode_fp4_bf16_panel_avx512(prepared, bf16_panel, p.k * kPairCols / 128);
  for (int64_t m0 = 0; m0 < p.m; m0 += kTileRows) {
    const int rows = int(p.m - m0 < kTileRows ? p.m - m0 : kTileRows);
    mxfp8_rows<P>(p, bf16_panel, wscale, m0, rows, tile);
    store_qkv_tile(p.epi, m0, rows, n0, cols, tile, kPairCols);
  }
}
}  // namespace

void qkv_fp4_bf16_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  if (p.sfv == 16) {
    fp4_bf16_pair<8>(p, pair, panel);
  } else {
    fp4_bf16_pair<16>(p, pair, panel);
  }
}

}  // namespace quantkv::cpu
