// Warp-level tensor-core instructions (mma.sync, sm_80+/sm_89+) with their fragment layouts.
// g = lane / 4 ("groupID"), c = lane % 4 ("threadID_in_group"), as in the PTX ISA.
#pragma once

#include <cstdint>

namespace quantkv::cuda::detail {

// D[16x8] += A[16x32] * B[32x8], e4m3 inputs, fp32 accumulate (sm_89+).
//   a[0]: row g,   k 4c..4c+3      a[1]: row g+8, k 4c..4c+3
//   a[2]: row g,   k 16+4c..+3     a[3]: row g+8, k 16+4c..+3
//   b[0]: k 4c..4c+3, col g        b[1]: k 16+4c..+3, col g
//   d[0], d[1]: row g, cols 2c, 2c+1     d[2], d[3]: row g+8, cols 2c, 2c+1
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

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
