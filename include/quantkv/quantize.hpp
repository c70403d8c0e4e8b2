// Block-scaled quantisation of activations (contract §5): NVFP4, MXFP4 and MXFP8 with 5-D
// swizzled scales.
#pragma once

#include <cstdint>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// The block-scaled formats of the fused QKV projection.
enum class BlockFormat : int {
  kNVFP4 = 0,  // packed e2m1 data, e4m3 scales, 16 values per scale
  kMXFP4 = 1,  // packed e2m1 data, e8m0 scales, 32 values per scale
  kMXFP8 = 2,  // e4m3 data (one byte per value), e8m0 scales, 32 values per scale
};
const char* block_format_name(BlockFormat format);
inline int sf_vector_size(BlockFormat f) { return f == BlockFormat::kNVFP4 ? 16 : 32; }
inline bool has_e8m0_scales(BlockFormat f) { return f != BlockFormat::kNVFP4; }
// Bytes of a row of K values: K/2 for packed fp4, K for MXFP8.
inline int64_t row_bytes(BlockFormat f, int64_t k) { return f == BlockFormat::kMXFP8 ? k : k / 2; }

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

}  // namespace quantkv
