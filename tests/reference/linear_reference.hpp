// Scalar reference of the plain linear layer (quantkv/linear.hpp): the test oracle. Each c[m, n]
// is the fused QKV reference's element (qkv_fp4_reference.hpp: the canonical order), then the
// row epilogue y = fl(c * alpha(n)) (+ bias[n]) rounded to bf16 or kept fp32.
#pragma once

#include <cstdint>

#include "quantkv/linear.hpp"

namespace quantkv::reference {

struct LinearReferenceArgs {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* x = nullptr;  // [M, row_bytes(K)] quantised, or null
  TensorView<const uint8_t, 5> x_scale;
  const uint16_t* x_bf16 = nullptr;  // [M, K] bf16 bits, or null
  const uint8_t* weight = nullptr;   // [N, row_bytes(K)]
  TensorView<const uint8_t, 5> weight_scale;
  float alpha = 1.0f;
  const float* column_alpha = nullptr;  // [N] or null
  const float* bias = nullptr;          // [N] or null
  const uint16_t* bias_bf16 = nullptr;  // [N] or null
  uint16_t* y = nullptr;                // [M, N] bf16, or
  float* y_f32 = nullptr;               // [M, N] fp32
};
void linear_reference(const LinearReferenceArgs& a);

}  // namespace quantkv::reference
