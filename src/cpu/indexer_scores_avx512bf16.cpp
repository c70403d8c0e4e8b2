// AVX-512 BF16 score kernel (compiled with the AVX-512 F/BW/VL/DQ/VNNI flags plus BF16: the
// _avx512bf16 suffix; the kernel table uses it only where the CPU has AVX512_BF16).
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
#include "cpu/indexer_mxfp4.hpp"
#include "cpu/simd/avx512.hpp"
#include "cpu/static_count.hpp"
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
      const __m256i c =
          width == 16
              ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes))
              : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
      r[i] = simd::e4m3_to_bf16(c, subnormal_table);
    }
    simd::transpose16x16(r);
    for (int i = 0; i < width; ++i) _mm512_store_si512(out + (p0 + i) * 16, r[i]);
  }
}

// bf16 bits of the e4m3 magnitude m = 0..127 (the contract's exact values; NaN 0x7F gives the
// canonical 0x7FC0), the table of the VBMI decode. Normals rebias the exponent; the seven
// subnormals m * 2^-9 are bf16 normals.
constexpr uint16_t e4m3_magnitude_bf16(int m) {
  constexpr uint16_t kSubnormals[8] = {0, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60};
  return m == 0x7F ? 0x7FC0 : m < 8 ? kSubnormals[m] : uint16_t((m << 4) + (120 << 7));
}
struct E4m3ByteTables {
  alignas(64) uint8_t lo[128];  // low byte of e4m3_magnitude_bf16(m)
  alignas(64) uint8_t hi[128];  // high byte
};
constexpr E4m3ByteTables make_e4m3_byte_tables() {
  E4m3ByteTables t{};
  for (int m = 0; m < 128; ++m) {
    t.lo[m] = uint8_t(e4m3_magnitude_bf16(m) & 0xFF);
    t.hi[m] = uint8_t(e4m3_magnitude_bf16(m) >> 8);
  }
  return t;
}
constexpr E4m3ByteTables kE4m3ByteTables = make_e4m3_byte_tables();

// The VBMI variant of pack_key_vector (same output): 64 codes of a key at a time, decoded by
// two 128-entry byte lookups (vpermi2b ignores the sign bit of the index) for the low and
// high bytes of the bf16 bits, the sign or-ed into the high byte, then the bytes interleaved
// into words: 5 instructions per 64 codes instead of 22. The interleave works within 128-bit
// lanes, so lane L of the low half holds pairs 8L..8L+3 of the 32 and the high half pairs
// 8L+4..8L+7: after the transpose, vector j of each half is stored at its pair.
__attribute__((target("avx512vbmi"))) void pack_key_vector_vbmi(const IndexerTile& t, int g,
                                                                uint32_t* packed) {
  const int D = t.head_dim, half = D / 2;
  const __m512i lo0 = _mm512_load_si512(kE4m3ByteTables.lo),
                lo1 = _mm512_load_si512(kE4m3ByteTables.lo + 64);
  const __m512i hi0 = _mm512_load_si512(kE4m3ByteTables.hi),
                hi1 = _mm512_load_si512(kE4m3ByteTables.hi + 64);
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  uint32_t* out = packed + std::size_t(g) * half * 16;
  for (int d0 = 0; d0 < D; d0 += 64) {
    const int codes = D - d0 < 64 ? D - d0 : 64;  // a multiple of 16
    const __mmask64 valid = codes == 64 ? ~__mmask64(0) : (__mmask64(1) << codes) - 1;
    __m512i w0[16], w1[16];
    for (int i = 0; i < 16; ++i) {
      const int key = 16 * g + i;
      const __m512i c = key < t.num_keys ? _mm512_maskz_loadu_epi8(valid, t.k_rows[key] + d0)
                                         : _mm512_setzero_si512();
      const __m512i lo = _mm512_permutex2var_epi8(lo0, c, lo1);
      const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, c, hi1), c, sign,
                                                   0xF8);  // hi | (c & sign)
      w0[i] = _mm512_unpacklo_epi8(lo, hi);
      w1[i] = _mm512_unpackhi_epi8(lo, hi);
    }
    simd::transpose16x16(w0);
    simd::transpose16x16(w1);
    const int p0 = d0 / 2;
    for (int j = 0; j < 16; ++j) {
      const int p = p0 + 8 * (j / 4) + j % 4;  // w0's pair; w1's is 4 further
      if (p < half) _mm512_store_si512(out + p * 16, w0[j]);
      if (p + 4 < half) _mm512_store_si512(out + (p + 4) * 16, w1[j]);
    }
  }
}

// MXFP4 keys (indexer_mxfp4.hpp): a 32-element block of a key is exactly 16 bf16 pairs, one
// vector. Its 16 code bytes are widened to dwords d and d | d << 12 puts the low nibble in the
// low bits of word 0 and the high nibble in those of word 1; vpermw reads 5 index bits, so the
// table (bf16 bits of the signed e2m1 values, the block's shift already added to the exponent
// of its non-zero entries) is repeated in its upper 16 words, where bit 4 of word 0's index
// (the high nibble's low bit) lands.
alignas(64) constexpr uint16_t kE2m1Bf16[32] = {
    0,      0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80,
    0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0, 0,      0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040,
    0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
constexpr __mmask32 kE2m1NonZero =
    ~((__mmask32(1) << 0) | (__mmask32(1) << 8) | (__mmask32(1) << 16) | (__mmask32(1) << 24));

inline __m512i mxfp4_block_bf16(const uint8_t* codes, int shift, __m512i table) {
  if (shift < kMxfp4MinShift) return _mm512_setzero_si512();
  const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m512i idx = _mm512_or_si512(d, _mm512_slli_epi32(d, 12));
  if (shift != 0) {
    table =
        _mm512_mask_add_epi16(table, kE2m1NonZero, table, _mm512_set1_epi16(int16_t(shift * 128)));
  }
  return _mm512_permutexvar_epi16(idx, table);
}

// pack_key_vector for MXFP4 keys (same output layout): one block of 16 keys per transpose.
void pack_key_vector_mxfp4(const IndexerTile& t, int g, uint32_t* packed) {
  const int D = t.head_dim, half = D / 2, nb = D / kMxfp4Block;
  const __m512i table = _mm512_load_si512(kE2m1Bf16);
  uint32_t* out = packed + std::size_t(g) * half * 16;
  int max_byte[16];
  for (int i = 0; i < 16; ++i) {
    const int key = 16 * g + i;
    max_byte[i] = key < t.num_keys ? mxfp4_max_byte(t.k_block_scales[key], nb) : 0;
  }
  for (int b = 0; b < nb; ++b) {
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      const int key = 16 * g + i;
      if (key >= t.num_keys) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      r[i] = mxfp4_block_bf16(t.k_rows[key] + 16 * b,
                              mxfp4_block_shift(t.k_block_scales[key], b, max_byte[i]), table);
    }
    simd::transpose16x16(r);
    for (int i = 0; i < 16; ++i) _mm512_store_si512(out + (16 * b + i) * 16, r[i]);
  }
}

// NVFP4 keys: 16 elements (8 code bytes, one e4m3 block scale) as floats: each byte doubled
// into two dwords, shifted by 0 or 4, a 16-entry float lookup of the signed e2m1 value, times
// the block scale (exact, indexer_mxfp4.hpp); two such halves make one bf16 vector (exact).
inline __m512 nvfp4_16(const uint8_t* codes, float sf, __m512 table) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
  const __m512i d = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
  const __m512i nib = _mm512_and_si512(
      _mm512_srlv_epi32(d, _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4)),
      _mm512_set1_epi32(0xF));
  return _mm512_mul_ps(_mm512_permutexvar_ps(nib, table), _mm512_set1_ps(sf));
}

// pack_key_vector for NVFP4 keys (same output layout).
void pack_key_vector_nvfp4(const IndexerTile& t, int g, uint32_t* packed) {
  const int D = t.head_dim, half = D / 2;
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  uint32_t* out = packed + std::size_t(g) * half * 16;
  for (int p0 = 0; p0 < half; p0 += 16) {  // 32 elements: scale blocks p0 / 8 and p0 / 8 + 1
    const int width = half - p0 < 16 ? half - p0 : 16;  // 8 when D % 32 == 16
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      const int key = 16 * g + i;
      if (key >= t.num_keys) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      const uint8_t* codes = t.k_rows[key] + p0;
      const uint8_t* sf = t.k_block_scales[key] + p0 / 8;
      const __m512 lo = nvfp4_16(codes, e4m3_to_float(sf[0]), table);
      const __m512 hi =
          width == 16 ? nvfp4_16(codes + 8, e4m3_to_float(sf[1]), table) : _mm512_setzero_ps();
      r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    }
    simd::transpose16x16(r);
    for (int i = 0; i < width; ++i) _mm512_store_si512(out + (p0 + i) * 16, r[i]);
  }
}

// Brings the K rows of keys [first, first + 64) of the tile towards L1.
void prefetch_key_rows(const IndexerTile& t, int first) {
  const int last = first + kIndexerKeyBlock < t.num_keys ? first + kIndexerKeyBlock : t.num_keys;
  for (int key = first; key < last; ++key) {
    for (int d = 0; d < t.head_dim; d += t.k_block_scales != nullptr ? 128 : 64)
      _mm_prefetch(reinterpret_cast<const char*>(t.k_rows[key] + d), _MM_HINT_T0);
  }
}

// Scores of one token against one 64-key block for NH heads starting at head h0, added into
// sacc in ascending head order.
template <int NH>
inline void head_group(const uint32_t* kblock, std::size_t vec_stride, const uint32_t* q, int half,
                       const float* w, __m512 sacc[kVecs]) {
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
    for (int v = 0; v < kVecs; ++v)
      sacc[v] = _mm512_fmadd_ps(_mm512_max_ps(zero, acc[h][v]), wh, sacc[v]);
  }
}

void score_block(const IndexerTile& t, const uint32_t* kblock, std::size_t vec_stride,
                 const uint32_t* q, const float* w, const float* kscale, float* out) {
  const int H = t.num_heads, half = t.head_dim / 2;
  __m512 sacc[kVecs];
  for (int v = 0; v < kVecs; ++v) sacc[v] = _mm512_setzero_ps();
  for_each_static_group<kHeadGroup>(H, [&](int h, auto nh) {
    head_group<nh>(kblock, vec_stride, q + std::size_t(h) * half, half, w + h, sacc);
  });
  for (int v = 0; v < kVecs; ++v) {
    _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(sacc[v], _mm512_loadu_ps(kscale + 16 * v)));
  }
}

// The tile driver; Pack(t, g, packed) repacks key vector g.
template <typename Pack>
inline void score_tile(const IndexerTile& t, void* scratch, Pack pack) {
  const int D = t.head_dim, half = D / 2, H = t.num_heads;
  // Scratch: packed K [kIndexerKeyTile / 16][D/2][16] dwords, then the padded key scales.
  uint32_t* packed = static_cast<uint32_t*>(scratch);
  float* kscale = reinterpret_cast<float*>(packed + std::size_t(kIndexerKeyTile) * half);

  const int num_blocks = (t.num_keys + kIndexerKeyBlock - 1) / kIndexerKeyBlock;
  for (int c = 0; c < num_blocks * kIndexerKeyBlock; ++c)
    kscale[c] = c < t.num_keys ? t.k_scales[c] : 0.0f;
  const std::size_t vec_stride = std::size_t(half) * 16;

  if (t.num_tokens <= kFewTokens) {
    // Decode-like items: pack and score one 64-key block at a time, prefetching the next
    // block's K rows (scattered over pages, usually not in cache) while this one computes.
    for (int kb = 0; kb < num_blocks; ++kb) {
      if (kb + 1 < num_blocks) prefetch_key_rows(t, (kb + 1) * kIndexerKeyBlock);
      for (int g = kb * kVecs; g < (kb + 1) * kVecs; ++g) pack(t, g, packed);
      for (int tok = 0; tok < t.num_tokens; ++tok) {
        if (kb * kIndexerKeyBlock >= tile_key_limit(t, tok)) continue;
        score_block(t, packed + kb * kVecs * vec_stride, vec_stride,
                    reinterpret_cast<const uint32_t*>(t.q_bf16 + std::size_t(tok) * H * D),
                    t.q_s + std::size_t(tok) * H, kscale + kb * kIndexerKeyBlock,
                    t.scores + t.row_offsets[tok] + kb * kIndexerKeyBlock);
      }
    }
    return;
  }
  // Many tokens: pack the whole tile once, then stream the tokens over it.
  for (int g = 0; g < num_blocks * kVecs; ++g) pack(t, g, packed);
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

}  // namespace

void indexer_score_tile_avx512bf16(const IndexerTile& t, void* scratch) {
  if (t.k_block_scales != nullptr) {
    score_tile(t, scratch, t.k_nvfp4 ? pack_key_vector_nvfp4 : pack_key_vector_mxfp4);
    return;
  }
  const __m512i subnormal_table = simd::e4m3_subnormal_bf16_table();
  score_tile(t, scratch, [&](const IndexerTile& tile, int g, uint32_t* packed) {
    pack_key_vector(tile, g, subnormal_table, packed);
  });
}

__attribute__((target("avx512vbmi"))) void indexer_score_tile_avx512bf16_vbmi(const IndexerTile& t,
                                                                              void* scratch) {
  if (t.k_block_scales != nullptr) {
    score_tile(t, scratch, t.k_nvfp4 ? pack_key_vector_nvfp4 : pack_key_vector_mxfp4);
    return;
  }
  score_tile(
      t, scratch,
      [](const IndexerTile& tile, int g, uint32_t* packed)
          __attribute__((target("avx512vbmi"))) { pack_key_vector_vbmi(tile, g, packed); });
}

}  // namespace quantkv::cpu

namespace quantkv::cpu {
void dpbf16ps_once_avx512bf16(const uint16_t* a, const uint16_t* b, float* acc) {
  const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(a),
                                    (__m512bh)_mm512_loadu_si512(b));
  _mm512_storeu_ps(acc, r);
}
}  // namespace quantkv::cpu
