// Internal: one validation per operation, shared by the CPU entry points (src/ops/*.cpp) and
// the CUDA host entry points (src/cuda/host/*.cpp), so both backends accept the same inputs
// and name a bad argument with the same message (contract §6; include/quantkv/cuda.hpp promises
// it). Each function checks what the operation itself requires; a backend adds only its own
// limits on top (the CUDA backend: int32 extents, alignment, contiguity, kernel limits) and
// the ragged metadata, which the CPU reads in place and the CUDA backend from host copies.
// Nothing here reads a cache's cache_lengths or lookup_table, or any other array's elements.
#pragma once

#include <cstdint>

#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/linear.hpp"
#include "quantkv/moe.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"

namespace quantkv::ops {

// ---- the lightning indexer (contract §3)
// output_indices int32 [T, top_k], q e4m3 [T, H, D], q_s [T, H]; the mask; the key cache
// (e4m3, one head of D values, one float scale per token) and layer_idx.
Status validate_indexer(const TensorView<int32_t, 2>& output_indices,
                        const TensorView<const float8_e4m3fn, 3>& q,
                        const TensorView<const float, 2>& q_s,
                        const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                        MaskType mask);

// The same over the engines' layout (include/quantkv/engine_layout.hpp): the buffer's own
// checks (validate_engine_k_cache) and head_size == D.
Status validate_indexer(const TensorView<int32_t, 2>& output_indices,
                        const TensorView<const float8_e4m3fn, 3>& q,
                        const TensorView<const float, 2>& q_s, const EngineIndexerKCache& k_cache,
                        MaskType mask);

// ---- the indexer's K store (contract §5)
// k [T, D] (float or bf16), the key cache as above with head_size == D, layer_idx, scale_mode.
Status validate_k_store(const TensorView<const float, 2>& k,
                        const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                        ScaleMode mode);
Status validate_k_store(const TensorView<const bfloat16, 2>& k,
                        const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                        ScaleMode mode);
// k [T, D] into the engines' layout.
Status validate_k_store(const TensorView<const float, 2>& k, const EngineIndexerKCache& k_cache,
                        ScaleMode mode);
Status validate_k_store(const TensorView<const bfloat16, 2>& k, const EngineIndexerKCache& k_cache,
                        ScaleMode mode);

// ---- the fused QKV projection (contract §4)
bool valid_block_format(BlockFormat f);
// weight [N, row_bytes(K)] and weight_scale [ceil(N/128), ceil(Kb/4), 32, 4, 4]; sets *k.
Status validate_qkv_weight(const TensorView<const uint8_t, 2>& weight,
                           const TensorView<const uint8_t, 5>& weight_scale, BlockFormat format,
                           int64_t* k);
// Everything but the weight (validated, or prepared, already) and the ragged metadata:
// hidden_state [M, row_bytes(K)], input_scale, output bf16 [M, q_dim], the factors (one
// tensor_sf when single_sf, else section_sf.{q,k,v}), the cache's geometry and layer_idx, and
// N = q_dim + kv_dim * num_kv_heads * head_size.
Status validate_qkv_call(const TensorView<const uint8_t, 2>& hidden, BlockFormat format, int64_t n,
                         int64_t k, const TensorView<const uint8_t, 5>& input_scale,
                         const SectionScales& sf, bool single_sf, const PagedKVCacheCollection& kv,
                         uint32_t layer_idx, const TensorView<bfloat16, 2>& output);
// The weight-only (bf16-activation) call: hidden_state bf16 [M, K] with unit row stride, then
// as above with section_sf checked for finiteness only (MXFP8 weights too).
Status validate_qkv_weight_only_call(const TensorView<const bfloat16, 2>& hidden, int64_t n,
                                     int64_t k, const SectionScales& sf,
                                     const PagedKVCacheCollection& kv, uint32_t layer_idx,
                                     const TensorView<bfloat16, 2>& output);

// ---- prepared weights and the plain linear layer (quantkv/linear.hpp)
// A WeightSource: exactly one of scale (5-D swizzled) and scale_rows ([N, Kb], unit stride
// along a row); sets *k.
Status validate_weight_source(const WeightSource& source, int64_t* k);
// Everything the linear layer needs but the prepared weight's own consistency and the
// aliasing of y with its inputs: one activation form matching the weight's K, the factors,
// the bias and exactly one output [M, N]. Sets *m.
Status validate_linear(const LinearArgs& args, int64_t* m);

// ---- the fused experts (quantkv/moe.hpp)
// Stacked experts: w13 [E, 2I, row_bytes(H)], w13_scale [E, 2I, H / SFV], w2 [E, H,
// row_bytes(I)], w2_scale [E, H, I / SFV], E > 0, H and I positive multiples of SFV, and the
// optional [E] factors (finite; global scales > 0 for NVFP4, 1 for MX). Sets *hidden, *inter.
Status validate_experts_source(const ExpertsSource& source, int64_t* hidden, int64_t* inter);
// Everything the call needs but the prepared experts' own consistency (E, H, I are taken from
// them) and the aliasing of y with its inputs: x [T, H], topk_ids / topk_weights [T, k], the
// enums and SwiGLU constants, the biases and exactly one output [T, H].
Status validate_fused_experts(const FusedExpertsArgs& args);

// ---- the block quantiser (contract §5)
// x [M, K] (float or bf16), global_scale (NVFP4), data [M, row_bytes(K)] with contiguous rows,
// scales [ceil(M/128), ceil(Kb/4), 32, 4, 4] contiguous.
Status validate_quantize(const TensorView<const float, 2>& x, float global_scale,
                         BlockFormat format, const TensorView<uint8_t, 2>& data,
                         const TensorView<uint8_t, 5>& scales);
Status validate_quantize(const TensorView<const bfloat16, 2>& x, float global_scale,
                         BlockFormat format, const TensorView<uint8_t, 2>& data,
                         const TensorView<uint8_t, 5>& scales);

}  // namespace quantkv::ops
