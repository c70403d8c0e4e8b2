// The fused QKV projection of contract §4: one block-scaled GEMM whose Q columns go to `output`
// and whose K/V columns go straight into the paged cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/linear.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// c[m, n] = tensor_sf * sum_k a(m,k) b(n,k) |sa(m, k/SFV)| |sb(n, k/SFV)|, fp32 accumulation.
// n < q_dim -> output[m, n] (bf16, RNE); the rest -> K (and V) of row m's position
// cache_len[b] + i in the paged cache, converted once to the cache dtype. Rows whose page is a
// sentinel (>= num_blocks) do not store K/V (their Q is still written).
// `tensor_sf` is the GEMM's factor 1 / (g_a * g_w), the inverse of the quantiser's global
// multipliers; it must be finite, and MXFP8 requires tensor_sf == 1.
// Results are bitwise identical across ISA paths and thread counts (docs/qkv_fp4.md).
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state,        // [M, row_bytes(K)]
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
    TensorView<const uint8_t, 2> weight,              // [N, row_bytes(K)]
    TensorView<const uint8_t, 5> input_scale,         // 5-D swizzled, R = M, Kb = K / SFV
    TensorView<const uint8_t, 5> weight_scale,        // 5-D swizzled, R = N, Kb = K / SFV
    float tensor_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output,  // [M, q_dim]
    BlockFormat format, const Context& ctx);

// Beyond MAX: one GEMM factor per column section (q, k, v), for checkpoints whose q/k/v
// shards carry different global scales.
struct SectionScales {
  float q = 1.0f, k = 1.0f, v = 1.0f;
  static SectionScales all(float f) { return {f, f, f}; }  // one factor for every section
};
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state,        // [M, row_bytes(K)]
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
    TensorView<const uint8_t, 2> weight,              // [N, row_bytes(K)]
    TensorView<const uint8_t, 5> input_scale,         // 5-D swizzled
    TensorView<const uint8_t, 5> weight_scale,        // 5-D swizzled
    SectionScales section_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output,  // [M, q_dim]
    BlockFormat format, const Context& ctx);

// ------------------------------------------------------------------ prepared weights
// The plain entry points above repack the weight on every call; a model that calls the
// projection many times prepares its weight once (quantkv/linear.hpp: PreparedWeights, the
// same for every GEMM entry point) and passes the result instead.
using PreparedQkvWeights = PreparedWeights;

// Repacks `weight` and `weight_scale` (validated as in the fused op) into `out`.
Status prepare_qkv_weights(TensorView<const uint8_t, 2> weight,        // [N, row_bytes(K)]
                           TensorView<const uint8_t, 5> weight_scale,  // 5-D swizzled, R = N
                           BlockFormat format, PreparedQkvWeights* out, const Context& ctx);

// The fused op on a prepared weight (its format is the prepared one).
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state,        // [M, row_bytes(K)]
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
    const PreparedQkvWeights& weight,                 // N, K, format
    TensorView<const uint8_t, 5> input_scale,         // 5-D swizzled, R = M, Kb = K / SFV
    SectionScales section_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output,  // [M, q_dim]
    const Context& ctx);

// ------------------------------------------------------------------ weight-only (W4A16)
// bf16 activations against a prepared NVFP4, MXFP4 or MXFP8 weight (the Marlin / W4A16 way):
// c[m, n] = section_sf * sum_kb fl(sum_k a(m,k) w(n,k)) |sb(n, kb)|, the block sums in the
// bf16 dot product's order (docs/checkpoints.md), every product exact, so results are
// bitwise identical across ISA paths and thread counts. Activations of magnitude below
// 2^-110 count as zero. `section_sf` holds the weight's own factors (1 / g_w per section,
// e.g. QkvCheckpointWeights::weight_factor; 1 for MX weights); there is no activation scale.
// Same outputs and paged K/V scatter as the fused op above.
Status fused_qkv_matmul_weight_only(TensorView<const bfloat16, 2> hidden_state,       // [M, K]
                                    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                                    const PreparedQkvWeights& weight, SectionScales section_sf,
                                    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
                                    TensorView<bfloat16, 2> output,  // [M, q_dim]
                                    const Context& ctx);

// ------------------------------------------------------------------ one call
// Every form above as one call with optional parts (the functions above are its wrappers):
//   activations: quantised `hidden_state` + `input_scale`, or bf16 `hidden_state_bf16`
//                (weight-only; needs a prepared weight);
//   weight:      `prepared`, or the plain `weight` + `weight_scale` in `format` (repacked per
//                call);
//   scale:       one GEMM factor per section, SectionScales::all(f) for one (W4A4: 1 / (g_a g_w);
//                weight-only: the weight's own 1 / g_w; MXFP8 W8A8: 1).
// Errors name the parts as spelled here ("hidden_state_bf16", "prepared", ...; the factors as
// "section_sf.q/k/v", as the wrappers do).
struct FusedQkvArgs {
  TensorView<const uint8_t, 2> hidden_state;        // [M, row_bytes(K)], or empty
  TensorView<const uint8_t, 5> input_scale;         // 5-D swizzled, R = M
  TensorView<const bfloat16, 2> hidden_state_bf16;  // [M, K], or empty
  TensorView<const uint32_t, 1> input_row_offsets;  // [B + 1]
  const PreparedWeights* prepared = nullptr;        // or:
  TensorView<const uint8_t, 2> weight;              // [N, row_bytes(K)]
  TensorView<const uint8_t, 5> weight_scale;        // 5-D swizzled, R = N
  BlockFormat format = BlockFormat::kNVFP4;         // of the plain weight
  SectionScales scale;
  const PagedKVCacheCollection* kv_collection = nullptr;
  uint32_t layer_idx = 0;
  TensorView<bfloat16, 2> output;  // [M, q_dim]
};
Status fused_qkv(const FusedQkvArgs& args, const Context& ctx);

}  // namespace quantkv
