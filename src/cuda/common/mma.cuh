// Warp-level tensor-core instructions (mma.sync, sm_80+/sm_89+) with their fragment layouts.
// g = lane / 4 ("groupID"), c = lane % 4 ("threadID_in_group"), as in the PTX ISA.
#pragma once

#include <cstdint>

namespace quantkv::cuda::detail {

// D[16x8] += A[16x16] * B[16x8], bf16 inputs, fp32 accumulate (sm_80+).
//   a[0]: row g,   k 2c, 2c+1      a[1]: row g+8, k 2c, 2c+1
//   a[2]: row g,   k 2c+8, 2c+9    a[3]: row g+8, k 2c+8, 2c+9
//   b[0]: k 2c, 2c+1, col g        b[1]: k 2c+8, 2c+9, col g
//   d as above. The lower k of each pair is in the low 16 bits.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats -> packed bf16x2 (lo in the low half), round to nearest even; exact for the
// dequantised operands, which are representable in bf16.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace quantkv::cuda::detail

namespace quantkv::cuda::detail {

// D[16x8] += A[16x16] * B[16x8], fp16 inputs, fp32 accumulate; fragments as the bf16 variant.
__device__ __forceinline__ void mma_f16_16x8x16(float (&d)[4], const uint32_t (&a)[4],
                                                const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two e4m3 values (a 16-bit pair) -> two fp16 values (exact: e4m3 is a subset of fp16).
// Whichever half each byte lands in, callers apply it to both GEMM operands alike, so a swap
// within the pair would only permute k.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t pair) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(pair));
  return r;
}

}  // namespace quantkv::cuda::detail
