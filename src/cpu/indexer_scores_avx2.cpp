// AVX2 + FMA score kernel (compiled with -mavx2 -mfma -mf16c).
//
// The tile's K is repacked once to f32 (exact) in [key vector][D][8 keys] order; q is
// broadcast per element. A register block is 16 keys (2 vectors) x 4 heads. The FMA of an exact
// e4m3 product rounds once, exactly like one step of a vdpbf16ps lane, and the odd element of
// each pair goes first, so the scores equal the scalar and AVX-512 kernels' bit for bit.
#include <immintrin.h>

#include "cpu/convert_kernels.hpp"
#include "cpu/indexer_kernels.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kVecs = 2;  // key vectors of 8 per register block
constexpr int kHeadGroup = 4;
constexpr int kSubBlock = 8 * kVecs;

// Keys [8g, 8g + 8) -> packed[(g * D + d) * 8 + key]; missing keys are zeros.
void pack_key_vector(const IndexerTile& t, int g, float* rows, float* packed) {
  const int D = t.head_dim;
  for (int r = 0; r < 8; ++r) {
    const int key = 8 * g + r;
    if (key < t.num_keys) {
      convert_e4m3_to_f32_avx2(t.k_rows[key], rows + r * D, D);
    } else {
      for (int d = 0; d < D; ++d) rows[r * D + d] = 0.0f;
    }
  }
  float* out = packed + std::size_t(g) * D * 8;
  for (int d = 0; d < D; ++d) {
    for (int r = 0; r < 8; ++r) out[d * 8 + r] = rows[r * D + d];
  }
}

template <int NH>
inline void head_group(const float* kblock, std::size_t vec_stride, const float* q, int D,
                       const float* w, __m256 sacc[kVecs]) {
  __m256 acc[NH][kVecs];
  for (int h = 0; h < NH; ++h)
    for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm256_setzero_ps();
  for (int p = 0; p < D / 2; ++p) {
    for (int e = 1; e >= 0; --e) {  // odd element first, as a vdpbf16ps lane
      const int d = 2 * p + e;
      __m256 kv[kVecs];
      for (int v = 0; v < kVecs; ++v) kv[v] = _mm256_load_ps(kblock + v * vec_stride + d * 8);
      for (int h = 0; h < NH; ++h) {
        const __m256 qb = _mm256_broadcast_ss(q + h * D + d);
        for (int v = 0; v < kVecs; ++v) acc[h][v] = _mm256_fmadd_ps(qb, kv[v], acc[h][v]);
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int h = 0; h < NH; ++h) {
    const __m256 wh = _mm256_set1_ps(w[h]);
    for (int v = 0; v < kVecs; ++v) sacc[v] = _mm256_fmadd_ps(_mm256_max_ps(zero, acc[h][v]), wh, sacc[v]);
  }
}

void score_sub_block(const IndexerTile& t, const float* kblock, std::size_t vec_stride,
                     const float* q, const float* w, const float* kscale, float* out) {
  const int H = t.num_heads, D = t.head_dim;
  __m256 sacc[kVecs];
  for (int v = 0; v < kVecs; ++v) sacc[v] = _mm256_setzero_ps();
  int h = 0;
  for (; h + kHeadGroup <= H; h += kHeadGroup) {
    head_group<kHeadGroup>(kblock, vec_stride, q + std::size_t(h) * D, D, w + h, sacc);
  }
  const float* qh = q + std::size_t(h) * D;
  switch (H - h) {
    case 3: head_group<3>(kblock, vec_stride, qh, D, w + h, sacc); break;
    case 2: head_group<2>(kblock, vec_stride, qh, D, w + h, sacc); break;
    case 1: head_group<1>(kblock, vec_stride, qh, D, w + h, sacc); break;
    default: break;
  }
  for (int v = 0; v < kVecs; ++v) {
    _mm256_storeu_ps(out + 8 * v, _mm256_mul_ps(sacc[v], _mm256_loadu_ps(kscale + 8 * v)));
  }
}

}  // namespace

void indexer_score_tile_avx2(const IndexerTile& t, void* scratch) {
  const int D = t.head_dim, H = t.num_heads;
  // Scratch: packed K [kIndexerKeyTile / 8][D][8] floats, then q of one token [H][D] floats
  // (which also stages 8 key rows while packing), then the padded key scales.
  float* packed = static_cast<float*>(scratch);
  float* qf = packed + indexer_tile_k_bytes(D) / sizeof(float);
  float kscale[kIndexerKeyTile];

  const int num_sub = (t.num_keys + kSubBlock - 1) / kSubBlock;
  for (int g = 0; g < num_sub * kVecs; ++g) pack_key_vector(t, g, qf, packed);
  for (int c = 0; c < num_sub * kSubBlock; ++c) kscale[c] = c < t.num_keys ? t.k_scales[c] : 0.0f;

  const std::size_t vec_stride = std::size_t(D) * 8;
  for (int tok = 0; tok < t.num_tokens; ++tok) {
    const int subs = (tile_key_limit(t, tok) + kSubBlock - 1) / kSubBlock;
    const uint16_t* q16 = t.q_bf16 + std::size_t(tok) * H * D;
    for (int i = 0; i < H * D; ++i) qf[i] = bf16_to_float(q16[i]);
    const float* w = t.q_s + std::size_t(tok) * H;
    float* row = t.scores + t.row_offsets[tok];
    for (int sb = 0; sb < subs; ++sb) {
      score_sub_block(t, packed + sb * kVecs * vec_stride, vec_stride, qf, w, kscale + sb * kSubBlock,
                      row + sb * kSubBlock);
    }
  }
}

}  // namespace quantkv::cpu
