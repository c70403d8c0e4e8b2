// AVX-512 repack of weight rows into the prepared layout (PreparedLayout, qkv_kernels.hpp). fp4:
// 16 columns x 64 bytes of their rows are loaded, each 4-byte group's nibbles are regrouped
// (k 8j..8j+3 into the low nibbles, k 8j+4..8j+7 into the high ones, as the scalar repack
// does), and a 16 x 16 dword transpose turns columns into the 64-byte chunks the kernels
// stream (lane c's dword at byte 4c).
#include <immintrin.h>

#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

// Bytes (b0, b1, b2, b3) of each dword -> (n0|n4<<4, n1|n5<<4, n2|n6<<4, n3|n7<<4), where
// n(2t) / n(2t+1) are the low / high nibbles of b_t.
inline __m512i regroup_nibbles(__m512i v) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i lo = _mm512_and_si512(v, mask);                        // n0 n2 n4 n6
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), mask);  // n1 n3 n5 n7
  const __m512i p_lo = _mm512_set1_epi32(int32_t(0x80018000u));        // bytes 0, -, 1, -
  const __m512i p_hi = _mm512_set1_epi32(int32_t(0x01800080u));        // bytes -, 0, -, 1
  const __m512i q_lo = _mm512_set1_epi32(int32_t(0x80038002u));        // bytes 2, -, 3, -
  const __m512i q_hi = _mm512_set1_epi32(int32_t(0x03800280u));        // bytes -, 2, -, 3
  // The byte indices are relative to each dword: add the dword's base within its 128-bit lane.
  const __m512i lane_base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
  auto idx = [&](__m512i pattern) {
    // Zeroing entries (0x80) stay negative after the add, so they still zero.
    return _mm512_add_epi8(pattern, lane_base);
  };
  const __m512i p =
      _mm512_or_si512(_mm512_shuffle_epi8(lo, idx(p_lo)), _mm512_shuffle_epi8(hi, idx(p_hi)));
  const __m512i q =
      _mm512_or_si512(_mm512_shuffle_epi8(lo, idx(q_lo)), _mm512_shuffle_epi8(hi, idx(q_hi)));
  return _mm512_or_si512(p, _mm512_slli_epi32(q, 4));  // q's bytes are < 16: no carry
}

}  // namespace

void repack_fp4_half_avx512(const uint8_t* src, int64_t stride, int64_t span_bytes, int block_bytes,
                            uint8_t* dst, int64_t unit_stride) {
  const int dwords_per_block = block_bytes / 4;
  for (int64_t s = 0; s < span_bytes; s += 64) {
    __m512i r[16];
    for (int c = 0; c < 16; ++c) r[c] = regroup_nibbles(_mm512_loadu_si512(src + c * stride + s));
    simd::transpose16x16(r);
    for (int q = 0; q < 16; ++q) {
      const int64_t d = s / 4 + q;  // dword index along the row
      _mm512_storeu_si512(
          dst + (d / dwords_per_block) * unit_stride + (d % dwords_per_block) * kFp4ChunkBytes,
          r[q]);
    }
  }
}

// MXFP8: the same transpose without the nibble regrouping; each transposed dword holds the k
// pairs 2d and 2d + 1 of its column, split into two 16-lane vectors of bf16-sized pairs.
void repack_mxfp8_half_avx512(const uint8_t* src, int64_t stride, int64_t span_bytes,
                              int block_bytes, uint8_t* dst, int64_t unit_stride) {
  const int pairs_per_block = block_bytes / 2;
  for (int64_t s = 0; s < span_bytes; s += 64) {
    __m512i r[16];
    for (int c = 0; c < 16; ++c) r[c] = _mm512_loadu_si512(src + c * stride + s);
    simd::transpose16x16(r);
    for (int q = 0; q < 16; ++q) {
      const int64_t pair = (s / 4 + q) * 2;  // k pair index along the row
      const __m256i even = _mm512_cvtepi32_epi16(r[q]);
      const __m256i odd = _mm512_cvtepi32_epi16(_mm512_srli_epi32(r[q], 16));
      uint8_t* base = dst + (pair / pairs_per_block) * unit_stride;
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(base + (pair % pairs_per_block) * kMxfp8VectorBytes), even);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(base + (pair % pairs_per_block + 1) * kMxfp8VectorBytes), odd);
    }
  }
}

}  // namespace quantkv::cpu
