// AVX2 + FMA score kernel (compiled with -mavx2 -mfma -mf16c).
//
// The tile's K is repacked once to f32 (exact) in [key vector][D][8 keys] order (bytes
// transposed in registers, then one vector conversion) and reused by every head and token; q
// is broadcast per element. A register block is 16 keys (2 vectors) x 6 heads. The FMA of an exact
// e4m3 product rounds once, exactly like one step of a vdpbf16ps lane, and the odd element of
// each pair goes first, so the scores equal the scalar and AVX-512 kernels' bit for bit.
#include <immintrin.h>

#include <cstring>

#include "cpu/convert_kernels.hpp"
#include "cpu/indexer_kernels.hpp"
#include "cpu/indexer_mxfp4.hpp"
#include "cpu/simd/avx2.hpp"
#include "cpu/static_count.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kVecs = 2;  // key vectors of 8 per register block
// 6 heads x 2 key vectors: 12 independent FMA chains (latency 4-5 x 2 ports needs 8-10), the
// 2 key vectors and one broadcast q: 15 of the 16 ymm registers.
constexpr int kHeadGroup = 6;
constexpr int kSubBlock = 8 * kVecs;

// Transposes the e4m3 bytes of 8 keys, 16 dims at a time: src[r] + d0 .. d0 + 15 (zeros for
// a missing key) -> dst[d * 8 + r] for d in [d0, d0 + 16). Three rounds of unpacks.
inline void transpose_8x16_bytes(const uint8_t* const src[8], int d0, uint8_t* dst) {
  __m128i r[8];
  for (int i = 0; i < 8; ++i) {
    r[i] = src[i] ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[i] + d0))
                  : _mm_setzero_si128();
  }
  __m128i a[8], b[8];
  for (int i = 0; i < 4; ++i) {  // a[2i]: keys 2i, 2i+1 interleaved, dims 0-7; a[2i+1]: dims 8-15
    a[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // keys 4i..4i+3: b[4i + j] holds dims 4j..4j+3
    b[4 * i + 0] = _mm_unpacklo_epi16(a[4 * i + 0], a[4 * i + 2]);
    b[4 * i + 1] = _mm_unpackhi_epi16(a[4 * i + 0], a[4 * i + 2]);
    b[4 * i + 2] = _mm_unpacklo_epi16(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm_unpackhi_epi16(a[4 * i + 1], a[4 * i + 3]);
  }
  __m128i* out = reinterpret_cast<__m128i*>(dst + d0 * 8);
  for (int j = 0; j < 4; ++j) {  // all 8 keys of dims 4j, 4j+1 and of 4j+2, 4j+3
    _mm_storeu_si128(out + 2 * j, _mm_unpacklo_epi32(b[j], b[4 + j]));
    _mm_storeu_si128(out + 2 * j + 1, _mm_unpackhi_epi32(b[j], b[4 + j]));
  }
}

// Keys [8g, 8g + 8) -> packed[(g * D + d) * 8 + key]; missing keys are zeros. The bytes are
// transposed first (in registers), then converted in one contiguous run: no scalar shuffling
// of floats, and each key of the tile is converted once for all heads and tokens.
void pack_key_vector(const IndexerTile& t, int g, uint8_t* staged, float* packed) {
  const int D = t.head_dim;
  const uint8_t* rows[8];
  for (int r = 0; r < 8; ++r) rows[r] = 8 * g + r < t.num_keys ? t.k_rows[8 * g + r] : nullptr;
  for (int d0 = 0; d0 < D; d0 += 16) transpose_8x16_bytes(rows, d0, staged);
  convert_e4m3_to_f32_avx2(staged, packed + std::size_t(g) * D * 8, int64_t(D) * 8);
}

// 8 values of an MXFP4 key (elements 8j..8j+7) from its 4 code bytes, times 2^shift (exact:
// shift >= kMxfp4MinShift keeps every value normal): the nibbles by variable shifts of the
// broadcast dword, the magnitude by an 8-entry float lookup, the sign from bit 3.
inline __m256 mxfp4_8(const uint8_t* codes, __m256 scale) {
  uint32_t w;
  std::memcpy(&w, codes, sizeof w);
  const __m256i nib = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(int(w)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
      _mm256_set1_epi32(0xF));
  const __m256 mag =
      _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), nib);
  const __m256 sign =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), 28));
  return _mm256_mul_ps(_mm256_or_ps(mag, sign), scale);
}

// r[i] = row i of an 8 x 8 float block -> r[i] = column i.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// The same for fp4 keys: 8 elements of each of the 8 keys decoded in registers (times the
// block's 2^shift for MXFP4, its e4m3 scale for NVFP4), then transposed, so
// packed[(g * D + d) * 8 + key] as for e4m3 keys.
void pack_key_vector_fp4(const IndexerTile& t, int g, float* packed) {
  const int D = t.head_dim;
  const int block = t.k_nvfp4 ? kNvfp4Block : kMxfp4Block, nb = D / block;
  int max_byte[8];
  bool present[8];
  for (int r = 0; r < 8; ++r) {
    const int key = 8 * g + r;
    present[r] = key < t.num_keys;
    max_byte[r] =
        present[r] && !t.k_nvfp4 ? mxfp4_max_byte(t.k_block_scales[key], D / kMxfp4Block) : 0;
  }
  float* out = packed + std::size_t(g) * D * 8;
  for (int b = 0; b < nb; ++b) {
    __m256 scale[8];
    bool zero[8];
    for (int r = 0; r < 8; ++r) {
      const uint8_t* sf = present[r] ? t.k_block_scales[8 * g + r] : nullptr;
      if (t.k_nvfp4) {
        zero[r] = !present[r];
        scale[r] = _mm256_set1_ps(zero[r] ? 0.0f : e4m3_to_float(sf[b]));
      } else {
        const int shift = present[r] ? mxfp4_block_shift(sf, b, max_byte[r]) : 0;
        zero[r] = !present[r] || shift < kMxfp4MinShift;
        scale[r] = _mm256_set1_ps(zero[r] ? 0.0f : recipe::pow2_float(shift));
      }
    }
    for (int j = 0; j < block / 8; ++j) {  // elements block * b + 8j .. + 7
      __m256 v[8];
      for (int r = 0; r < 8; ++r) {
        v[r] = zero[r] ? _mm256_setzero_ps()
                       : mxfp4_8(t.k_rows[8 * g + r] + (b * block + 8 * j) / 2, scale[r]);
      }
      transpose8x8(v);
      for (int i = 0; i < 8; ++i) _mm256_store_ps(out + (b * block + 8 * j + i) * 8, v[i]);
    }
  }
}

// q of one token [H][D] bf16 bits -> f32 (exact).
void q_to_f32(const uint16_t* q16, int n, float* qf) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(qf + i, simd::load_bf16_as_f32(q16 + i));
  }
  for (; i < n; ++i) qf[i] = bf16_to_float(q16[i]);
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
    for (int v = 0; v < kVecs; ++v)
      sacc[v] = _mm256_fmadd_ps(_mm256_max_ps(zero, acc[h][v]), wh, sacc[v]);
  }
}

void score_sub_block(const IndexerTile& t, const float* kblock, std::size_t vec_stride,
                     const float* q, const float* w, const float* kscale, float* out) {
  const int H = t.num_heads, D = t.head_dim;
  __m256 sacc[kVecs];
  for (int v = 0; v < kVecs; ++v) sacc[v] = _mm256_setzero_ps();
  for_each_static_group<kHeadGroup>(H, [&](int h, auto nh) {
    head_group<nh>(kblock, vec_stride, q + std::size_t(h) * D, D, w + h, sacc);
  });
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
  // qf stages a key vector's transposed e4m3 bytes (8 D bytes) before it holds a token's q.
  for (int g = 0; g < num_sub * kVecs; ++g) {
    if (t.k_block_scales != nullptr) {
      pack_key_vector_fp4(t, g, packed);
    } else {
      pack_key_vector(t, g, reinterpret_cast<uint8_t*>(qf), packed);
    }
  }
  for (int c = 0; c < num_sub * kSubBlock; ++c) kscale[c] = c < t.num_keys ? t.k_scales[c] : 0.0f;

  const std::size_t vec_stride = std::size_t(D) * 8;
  for (int tok = 0; tok < t.num_tokens; ++tok) {
    const int subs = (tile_key_limit(t, tok) + kSubBlock - 1) / kSubBlock;
    const uint16_t* q16 = t.q_bf16 + std::size_t(tok) * H * D;
    q_to_f32(q16, H * D, qf);
    const float* w = t.q_s + std::size_t(tok) * H;
    float* row = t.scores + t.row_offsets[tok];
    for (int sb = 0; sb < subs; ++sb) {
      score_sub_block(t, packed + sb * kVecs * vec_stride, vec_stride, qf, w,
                      kscale + sb * kSubBlock, row + sb * kSubBlock);
    }
  }
}

}  // namespace quantkv::cpu
