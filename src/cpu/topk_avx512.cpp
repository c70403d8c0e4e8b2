// AVX-512 threshold filter of the top-k (compiled with the AVX-512 flags): 16 compares per
// instruction; the rare passing lanes are compressed in a register, then stored whole (the
// output has 16 entries of slack), which is much faster than vpcompressd to memory.
#include <immintrin.h>

#include "cpu/topk.hpp"

namespace quantkv::cpu {

int64_t filter_at_least_avx512(const float* scores, int64_t len, float threshold, int32_t* out) {
  const __m512 thr = _mm512_set1_ps(threshold);
  __m512i pos = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  int64_t count = 0, j = 0;
  for (; j + 16 <= len; j += 16) {
    // _CMP_GE_OQ: false for NaN, like the scalar `>=`.
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(scores + j), thr, _CMP_GE_OQ);
    if (m) {
      _mm512_storeu_si512(out + count, _mm512_maskz_compress_epi32(m, pos));
      count += __builtin_popcount(m);
    }
    pos = _mm512_add_epi32(pos, step);
  }
  // The tail's positions are relative to scores + j.
  const int64_t tail = filter_at_least_scalar(scores + j, len - j, threshold, out + count);
  for (int64_t i = count; i < count + tail; ++i) out[i] += int32_t(j);
  return count + tail;
}

}  // namespace quantkv::cpu
