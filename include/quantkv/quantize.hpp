// Block-scaled quantisation of activations (contract §5): NVFP4, MXFP4 and MXFP8 with 5-D
// swizzled scales.
#pragma once

#include <cstdint>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// x [M, K] -> data [M, row_bytes(K)] and scales, 5-D swizzled for R = M, Kb = K / SFV
// (padding written as zeros). `global_scale` is the global multiplier g = 448*6 / amax for
// NVFP4 (not the GEMM's tensor_sf, which is 1 / (g_a * g_w)); it is ignored by MX formats.
Status quantize_dynamic_block_scaled(TensorView<const float, 2> x,  // [M, K]
                                     float global_scale, BlockFormat format,
                                     TensorView<uint8_t, 2> data,    // [M, row_bytes(K)]
                                     TensorView<uint8_t, 5> scales,  // 5-D swizzled
                                     const Context& ctx);
Status quantize_dynamic_block_scaled(TensorView<const bfloat16, 2> x,  // [M, K]
                                     float global_scale, BlockFormat format,
                                     TensorView<uint8_t, 2> data,    // [M, row_bytes(K)]
                                     TensorView<uint8_t, 5> scales,  // 5-D swizzled
                                     const Context& ctx);

// The same as one call: fp32 or bf16 x (exactly one view given); the fixed forms above are its
// wrappers (same bits).
struct QuantizeArgs {
  TensorView<const float, 2> x;          // [M, K] fp32, or
  TensorView<const bfloat16, 2> x_bf16;  // [M, K] bf16
  float global_scale = 1.0f;             // NVFP4's g (ignored by MX formats)
  BlockFormat format = BlockFormat::kNVFP4;
  TensorView<uint8_t, 2> data;    // [M, row_bytes(K)]
  TensorView<uint8_t, 5> scales;  // 5-D swizzled
};
Status quantize_dynamic_block_scaled(const QuantizeArgs& args, const Context& ctx);

}  // namespace quantkv
