// Scalar reference of the fused QKV projection (contract §4): the test oracle. It reads the API
// layouts directly (packed rows, 5-D swizzled scales, the paged cache) and computes every
// output in the canonical fp32 order of src/cpu/qkv_kernels.hpp, so the fast paths must match
// it bit for bit. It assumes valid arguments (the public entry points validate).
#pragma once

#include <cstdint>

#include "quantkv/qkv_fp4.hpp"

namespace quantkv::reference {

// c[m, n] before the section factor, in the canonical order.
float qkv_gemm_element(BlockFormat format, const uint8_t* a_row,  // [row_bytes(K)]
                       const uint8_t* b_row,                      // [row_bytes(K)]
                       TensorView<const uint8_t, 5> input_scale,
                       TensorView<const uint8_t, 5> weight_scale, int64_t m, int64_t n, int64_t k);

// The whole op: Q into `output`, K/V into the cache, sentinel pages skipped.
void fused_qkv_reference(TensorView<const uint8_t, 2> hidden_state,        // [M, row_bytes(K)]
                         TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                         TensorView<const uint8_t, 2> weight,              // [N, row_bytes(K)]
                         TensorView<const uint8_t, 5> input_scale,
                         TensorView<const uint8_t, 5> weight_scale, SectionScales section_sf,
                         const PagedKVCacheCollection& kv, uint32_t layer_idx,
                         TensorView<bfloat16, 2> output,  // [M, q_dim]
                         BlockFormat format);

// Weight-only (bf16 activations): c[m, n] before the section factor, in the canonical order
// (activations below 2^-110 count as zero; block sums in the bf16 dot product's lane order).
float weight_only_gemm_element(BlockFormat format, const uint16_t* a_row,  // bf16 bits [K]
                               const uint8_t* b_row,                       // [row_bytes(K)]
                               TensorView<const uint8_t, 5> weight_scale, int64_t n, int64_t k);

void fused_qkv_weight_only_reference(TensorView<const bfloat16, 2> hidden_state,  // [M, K]
                                     TensorView<const uint32_t, 1> input_row_offsets,
                                     TensorView<const uint8_t, 2> weight,  // [N, row_bytes(K)]
                                     TensorView<const uint8_t, 5> weight_scale,
                                     SectionScales section_sf, const PagedKVCacheCollection& kv,
                                     uint32_t layer_idx, TensorView<bfloat16, 2> output,
                                     BlockFormat format);

}  // namespace quantkv::reference
