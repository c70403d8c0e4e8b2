// AVX-512 BF16 score kernel (compiled with the AVX-512 F/BW/VL/DQ/VNNI/BF16 flags).
//
// The tile's K is repacked once into VNNI order, [key vector][D/2][16 keys] dwords of bf16
// pairs (e4m3 -> bf16 is exact), so one aligned load feeds 16 keys with one d-pair each; q
// pairs are broadcast. A register block is 64 keys (4 vectors) x 4 heads = 16 independent
// accumulator chains; ReLU, the q_s weighting (heads in ascending order) and the key scale
// happen in registers. Per lane, vdpbf16ps is exactly the canonical dot order of
// indexer_kernels.hpp.
#include <immintrin.h>

#include <cstring>

#include "cpu/indexer_kernels.hpp"
#include "cpu/simd/avx512.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kVecs = kIndexerKeyBlock / 16;  // key vectors per register block
constexpr int kHeadGroup = 4;
constexpr int kFewTokens = 4;  // items with at most this many tokens are scored block by block

// Repacks keys [16g, 16g + 16) of the tile into packed[(g * D/2 + p) * 16 + key] (dwords);
// keys beyond num_keys become zeros (never read from the cache). In registers, 16 pairs at a
// time: each key's 32 codes are decoded to 16 bf16 pairs (one vector per key), then the 16 x 16
// dword transpose turns them into one vector per pair.
void pack_key_vector(const IndexerTile& t, int g, __m512i subnormal_table, uint32_t* packed) {
  const int D = t.head_dim, half = D / 2;
  uint32_t* out = packed + std::size_t(g) * half * 16;
  for (int p0 = 0; p0 < half; p0 += 16) {
    const int width = half - p0 < 16 ? half - p0 : 16;  // 8 when D % 32 == 16
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      const int key = 16 * g + i;
      if (key >= t.num_keys) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      const uint8_t* codes = t.k_rows[key] + 2 * p0;
      const __m256i c = width == 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes))
                                    : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
      r[i] = simd::e4m3_to_bf16(c, subnormal_table);
    }
    simd::transpose16x16(r);
    for (int i = 0; i < width; ++i) _mm512_store_si512(out + (p0 + i) * 16, r[i]);
  }
}

// Brings the K rows of keys [first, first + 64) of the tile towards L1.
void prefetch_key_rows(const IndexerTile& t, int first) {
  const int last = first + kIndexerKeyBlock < t.num_keys ? first + kIndexerKeyBlock : t.num_keys;
  for (int key = first; key < last; ++key) {
    for (int d = 0; d < t.head_dim; d += 64) _mm_prefetch(reinterpret_cast<const char*>(t.k_rows[key] + d), _MM_HINT_T0);
  }
}

// Scores of one token against one 64-key block for NH heads starting at head h0, added into
// sacc in ascending head order.
template <int NH>
inline void head_group(const uint32_t* kblock, std::size_t vec_stride, const uint32_t* q,
                       int half, const float* w, __m512 sacc[kVecs]) {
  __m512 acc[NH][kVecs];
  for (int h = 0; h < NH; ++h)
    for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm512_setzero_ps();
  for (int p = 0; p < half; ++p) {
    __m512i kv[kVecs];
    for (int v = 0; v < kVecs; ++v) kv[v] = _mm512_load_si512(kblock + v * vec_stride + p * 16);
    for (int h = 0; h < NH; ++h) {
      const __m512bh qb = (__m512bh)_mm512_set1_epi32(int(q[h * half + p]));
      for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm512_dpbf16_ps(acc[h][v], (__m512bh)kv[v], qb);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int h = 0; h < NH; ++h) {
    const __m512 wh = _mm512_set1_ps(w[h]);
    // max(0, x): MAXPS returns its second operand for NaN, so NaN propagates.
    for (int v = 0; v < kVecs; ++v) sacc[v] = _mm512_fmadd_ps(_mm512_max_ps(zero, acc[h][v]), wh, sacc[v]);
  }
}

void score_block(const IndexerTile& t, const uint32_t* kblock, std::size_t vec_stride,
                 const uint32_t* q, const float* w, const float* kscale, float* out) {
  const int H = t.num_heads, half = t.head_dim / 2;
  __m512 sacc[kVecs];
  for (int v = 0; v < kVecs; ++v) sacc[v] = _mm512_setzero_ps();
  int h = 0;
  for (; h + kHeadGroup <= H; h += kHeadGroup) {
    head_group<kHeadGroup>(kblock, vec_stride, q + std::size_t(h) * half, half, w + h, sacc);
  }
  const uint32_t* qh = q + std::size_t(h) * half;
  switch (H - h) {
    case 3: head_group<3>(kblock, vec_stride, qh, half, w + h, sacc); break;
    case 2: head_group<2>(kblock, vec_stride, qh, half, w + h, sacc); break;
    case 1: head_group<1>(kblock, vec_stride, qh, half, w + h, sacc); break;
    default: break;
  }
  for (int v = 0; v < kVecs; ++v) {
    _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(sacc[v], _mm512_loadu_ps(kscale + 16 * v)));
  }
}

}  // namespace

void indexer_score_tile_avx512(const IndexerTile& t, void* scratch) {
  const int D = t.head_dim, half = D / 2, H = t.num_heads;
  // Scratch: packed K [kIndexerKeyTile / 16][D/2][16] dwords, then the padded key scales.
  uint32_t* packed = static_cast<uint32_t*>(scratch);
  float* kscale = reinterpret_cast<float*>(packed + std::size_t(kIndexerKeyTile) * half);
  const __m512i subnormal_table = simd::e4m3_subnormal_bf16_table();

  const int num_blocks = (t.num_keys + kIndexerKeyBlock - 1) / kIndexerKeyBlock;
  for (int c = 0; c < num_blocks * kIndexerKeyBlock; ++c) kscale[c] = c < t.num_keys ? t.k_scales[c] : 0.0f;
  const std::size_t vec_stride = std::size_t(half) * 16;

  if (t.num_tokens <= kFewTokens) {
    // Decode-like items: pack and score one 64-key block at a time, prefetching the next
    // block's K rows (scattered over pages, usually not in cache) while this one computes.
    for (int kb = 0; kb < num_blocks; ++kb) {
      if (kb + 1 < num_blocks) prefetch_key_rows(t, (kb + 1) * kIndexerKeyBlock);
      for (int g = kb * kVecs; g < (kb + 1) * kVecs; ++g) pack_key_vector(t, g, subnormal_table, packed);
      for (int tok = 0; tok < t.num_tokens; ++tok) {
        if (kb * kIndexerKeyBlock >= tile_key_limit(t, tok)) continue;
        score_block(t, packed + kb * kVecs * vec_stride, vec_stride,
                    reinterpret_cast<const uint32_t*>(t.q_bf16 + std::size_t(tok) * H * D), t.q_s + std::size_t(tok) * H,
                    kscale + kb * kIndexerKeyBlock, t.scores + t.row_offsets[tok] + kb * kIndexerKeyBlock);
      }
    }
    return;
  }
  // Many tokens: pack the whole tile once, then stream the tokens over it.
  for (int g = 0; g < num_blocks * kVecs; ++g) pack_key_vector(t, g, subnormal_table, packed);
  for (int tok = 0; tok < t.num_tokens; ++tok) {
    const int blocks = (tile_key_limit(t, tok) + kIndexerKeyBlock - 1) / kIndexerKeyBlock;
    const uint32_t* q = reinterpret_cast<const uint32_t*>(t.q_bf16 + std::size_t(tok) * H * D);
    const float* w = t.q_s + std::size_t(tok) * H;
    float* row = t.scores + t.row_offsets[tok];
    for (int kb = 0; kb < blocks; ++kb) {
      score_block(t, packed + kb * kVecs * vec_stride, vec_stride, q, w,
                  kscale + kb * kIndexerKeyBlock, row + kb * kIndexerKeyBlock);
    }
  }
}

}  // namespace quantkv::cpu

namespace quantkv::cpu {
void dpbf16ps_once_avx512(const uint16_t* a, const uint16_t* b, float* acc) {
  const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(a),
                                    (__m512bh)_mm512_loadu_si512(b));
  _mm512_storeu_ps(acc, r);
}
}  // namespace quantkv::cpu
