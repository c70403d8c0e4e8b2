// Small scalar helpers of the CUDA kernels, written as QUANTKV_HD (host + device) so the CPU
// test suite checks them against the codecs and the contract's ordering
// (tests/cuda/cuda_helpers_test.cpp) on machines without a GPU.
#pragma once

#include <cstdint>

#include "quantkv/formats.hpp"

namespace quantkv::cuda::detail {

// ------------------------------------------------------------------ top-k ordering (contract §3)
// Maps a score to a uint32 whose unsigned order is the score order: NaN -> 0 (below -inf),
// -0 and +0 -> the same key (they are equal scores, so ties break by index), otherwise the
// usual flip (negative: all bits inverted; positive: sign bit set).
QUANTKV_HD uint32_t ordered_score_key(float score) {
  const uint32_t u = quantkv::detail::float_bits(score);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0u;   // NaN
  if ((u & 0x7FFFFFFFu) == 0u) return 0x80000000u;  // ±0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// A (key, index) pair packed so that a DESCENDING sort of the uint64 gives score descending,
// then index ascending. 0 is below every real pair (real keys of NaN are 0 but their low half
// is ~j > 0 for any j < 2^32 - 1), so 0 pads a sort buffer.
QUANTKV_HD uint64_t topk_composite(uint32_t key, uint32_t index) {
  return (uint64_t(key) << 32) | uint64_t(0xFFFFFFFFu - index);
}
QUANTKV_HD int32_t topk_composite_index(uint64_t composite) {
  return int32_t(0xFFFFFFFFu - uint32_t(composite & 0xFFFFFFFFu));
}

// ------------------------------------------------------------------ indexer head reduction
// ReLU of one head's dot product: max(x, 0), with a NaN dot product propagated (so a NaN key
// gets a NaN score and ranks last instead of silently scoring 0).
QUANTKV_HD float indexer_relu(float x) { return x < 0.0f ? 0.0f : x; }

// ------------------------------------------------------------------ dequantisation
// e2m1 code (4 bits) -> float without a table: the 3 magnitude bits placed at the top of an
// fp32 exponent/mantissa give 2^(ee-127) * (1 + m/2) (a subnormal for ee == 0), and 2^126
// rebias it exactly to the e2m1 value. Needs denormal support (nvcc's default, -ftz=false).
QUANTKV_HD float e2m1_to_float_bits(uint32_t code) {
  const float mag = quantkv::detail::bits_float((code & 7u) << 22) * 0x1p126f;
  return quantkv::detail::bits_float(quantkv::detail::float_bits(mag) | ((code & 8u) << 28));
}

// Eight packed e2m1 values (one word; element 2c in the low nibble of byte c) -> four bf16x2
// words holding value * 2^-126, exactly: each 3-bit magnitude lands on bf16 bits 6..8 (the top
// mantissa bit and the two low exponent bits), which reads as 2^(ee-127) * (1 + m/2), or
// m * 2^-127 as a subnormal for ee == 0; multiplying by 2^126 (exact) gives the e2m1 value.
// Word i pairs elements i (low half) and i + 4 (high half): a fixed permutation of the 8 k
// slots, harmless because both GEMM operands go through it (a dot product ignores k order).
// Four shift/mask pairs per 8 values instead of a per-value decode.
QUANTKV_HD void e2m1x8_to_bf16x2_prescaled(uint32_t w, uint32_t (&out)[4]) {
  out[0] = ((w & 0x00070007u) << 6) | ((w & 0x00080008u) << 12);
  out[1] = ((w & 0x00700070u) << 2) | ((w & 0x00800080u) << 8);
  out[2] = ((w & 0x07000700u) >> 2) | ((w & 0x08000800u) << 4);
  out[3] = ((w & 0x70007000u) >> 6) | (w & 0x80008000u);
}
// The k slot (0..7) each half of e2m1x8_to_bf16x2_prescaled's output holds: word i, half h.
QUANTKV_HD int e2m1x8_slot(int word, int half) { return word + 4 * half; }
inline constexpr uint32_t kBf16x2Two126 = 0x7E807E80u;  // (2^126, 2^126)

// Block scales are magnitudes (UE4M3): the sign bit of an e4m3 scale is ignored (contract §4);
// 0x7F / 0xFF stay NaN. e8m0 scales have no sign.
QUANTKV_HD float block_scale_value(uint8_t bits, bool e8m0) {
  return e8m0 ? e8m0_to_float(bits) : e4m3_to_float(uint8_t(bits & 0x7Fu));
}

// The same scale as bf16 bits in both halves of a word (exact: e4m3 and e8m0 fit bf16).
QUANTKV_HD uint32_t block_scale_bf16x2(uint8_t bits, bool e8m0) {
  const uint32_t h = quantkv::detail::float_bits(block_scale_value(bits, e8m0)) >> 16;
  return h | (h << 16);
}

// The 5-D swizzled scale offset (scale_layout.hpp) split into a per-row part, computed once
// per row by a kernel, and a per-column part: offset(r, kb) = row_base(r) + col_offset(kb).
// Both in 64 bits: the column part is kb * 128 + (kb & 3), past int32 from kb = 2^24 on
// (K = 2^28 for NVFP4), within the int32 K the CUDA entry points accept.
QUANTKV_HD int64_t swizzled_row_base(int64_t r, int64_t kb_count) {
  return (r / 128) * (((kb_count + 3) / 4) * 512) + (r % 32) * 16 + ((r % 128) / 32) * 4;
}
QUANTKV_HD int64_t swizzled_col_offset(int64_t kb) { return (kb >> 2) * 512 + (kb & 3); }

// Sequence of row m: the largest b with offs[b] <= m (empty sequences are skipped).
QUANTKV_HD int32_t sequence_of_row(const uint32_t* offs, int32_t batch, uint32_t m) {
  int32_t lo = 0, hi = batch;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) / 2;
    if (offs[mid] <= m)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// contract §3's key bound of token t (a row of sequence b = sequence_of_row(offs, batch, t)):
// causal ? cache_len[b] + i + 1 : cache_len[b] + seq_len[b], with i = t - offs[b]. The host
// plans with it on its copies; the top-k kernel recomputes it from the device arrays.
QUANTKV_HD int32_t indexer_key_bound(const uint32_t* offs, const uint32_t* cache_lengths,
                                     int64_t cache_lengths_stride, int32_t batch, uint32_t t,
                                     bool causal) {
  const int32_t b = sequence_of_row(offs, batch, t);
  const uint32_t cache_len = cache_lengths[b * cache_lengths_stride];
  return int32_t(causal ? cache_len + (t - offs[b]) + 1 : cache_len + (offs[b + 1] - offs[b]));
}

}  // namespace quantkv::cuda::detail
