// Pieces shared by the two fused-QKV kernels (tiled GEMM and decode GEMV): operand loads,
// exact dequantisation to bf16 pairs, and the epilogue that writes Q and scatters K/V.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/kernel_math.hpp"
#include "cuda/common/paged.cuh"
#include "cuda/launch.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::cuda::detail {

// kWords 32-bit words from p (4*kWords bytes). `vec`: p is 4*kWords-byte aligned.
template <int kWords>
__device__ __forceinline__ void load_words(const uint8_t* p, bool vec, uint32_t (&w)[kWords]) {
  static_assert(kWords == 2 || kWords == 4);
  if (vec) {
    if constexpr (kWords == 4) {
      const uint4 v = *reinterpret_cast<const uint4*>(p);
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      w[0] = v.x, w[1] = v.y;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    w[i] = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 | uint32_t(p[4 * i + 2]) << 16 |
           uint32_t(p[4 * i + 3]) << 24;
  }
}

// Compile-time facts of a block format, so kernels divide by constants.
template <BlockFormat F>
struct FormatTraits {
  static constexpr bool kFp8 = F == BlockFormat::kMXFP8;   // one byte per value
  static constexpr bool kE8m0 = F != BlockFormat::kNVFP4;  // e8m0 scales (else e4m3)
  static constexpr int kSfv = F == BlockFormat::kNVFP4 ? 16 : 32;
};

// d = a * b on bf16 pairs (round to nearest; exact for the products formed here, which are
// representable; subnormal bf16 inputs are honoured: PTX mul.bf16x2 has no flush-to-zero).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Eight packed e2m1 values times the block scale (bf16 in both halves) -> four bf16x2 words,
// in the slot order of e2m1x8_to_bf16x2_prescaled (word i = elements i and i + 4). Exact:
// e2m1 * e4m3 / e8m0 fits bf16's 8-bit significand.
__device__ __forceinline__ void dequant_fp4x8(uint32_t packed, uint32_t scale_bf16x2,
                                              uint32_t (&out)[4]) {
  e2m1x8_to_bf16x2_prescaled(packed, out);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = mul_bf16x2(mul_bf16x2(out[i], kBf16x2Two126), scale_bf16x2);
}
// Four e4m3 values (one word, element 0 in the low byte) times `scale` -> two bf16x2 words
// (elements 2i, 2i+1 in word i). Packed, without the branches of a scalar decode: each byte
// pair becomes two fp16 in one conversion (cvt.rn.f16x2.e4m3x2, the low byte to the low half;
// exact: e4m3 is a subset of fp16), each fp16 widens exactly to fp32, and the fp32 product with
// the scale is rounded once to bf16: the same products and rounding as the scalar decode
// (e4m3_to_float(x) * scale), so the same bits. A NaN element stays a NaN (fp16's canonical
// one), and any NaN operand gives a NaN output, stored as the canonical 0x7FFF either way.
__device__ __forceinline__ void dequant_fp8x4(uint32_t packed, float scale, uint32_t (&out)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(packed >> (16 * i)), __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    out[i] = pack_bf16x2(f.x * scale, f.y * scale);
  }
}

// Stores raw accumulator c (sum before the GEMM factor) of (m, n): Q columns to `out` as bf16,
// K/V columns into the page of row m's position, converted once to the cache dtype. Rows
// whose page is a sentinel are skipped (contract §4).
__device__ __forceinline__ void qkv_store(const launch::QkvArgs& a, int m, int n, float c) {
  if (m >= a.M || n >= a.N) return;
  if (n < a.q_dim) {
    a.out[int64_t(m) * a.out_stride0 + int64_t(n) * a.out_stride1] = float_to_bf16(c * a.sf_q);
    return;
  }
  const int col = n - a.q_dim;
  const int kv = col / a.kv_width;  // 0 = K, 1 = V (always 0 for an MLA cache, kv_dim 1)
  const int within = col - kv * a.kv_width;
  const int head = within / int(a.kv.head_size), d = within - head * int(a.kv.head_size);
  const float v = c * (kv ? a.sf_v : a.sf_k);
  const int32_t b = sequence_of_row(a.offs, a.batch, uint32_t(m));
  const int64_t pos = int64_t(cache_length(a.kv, b)) + (m - int64_t(a.offs[b]));
  const uint32_t page = page_of(a.kv, b, pos);
  if (page >= a.kv.num_blocks) return;
  const int64_t row = paged_row(a.kv, page, kv, pos % a.kv.page_size);
  const int64_t e = (row * a.kv.num_heads + head) * a.kv.head_size + d;
  switch (DType(a.kv.dtype)) {
    case DType::kF32:
      static_cast<float*>(a.kv.blocks)[e] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(a.kv.blocks)[e] = float_to_bf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(a.kv.blocks)[e] = float_to_fp16(v);
      break;
    case DType::kE4M3:
      static_cast<uint8_t*>(a.kv.blocks)[e] = float_to_e4m3(v);
      break;
  }
}

}  // namespace quantkv::cuda::detail
