// The C API (include/quantkv/quantkv.h), part 2: the operations. Each entry converts and checks
// the C structs, then calls the C++ operation, which validates everything before it writes.
#include <memory>

#include "c_api_internal.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/quantkv.h"

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

namespace {

// The operands the two fused-QKV entry points share.
struct QkvOperands {
  TensorView<const uint8_t, 2> hidden_state, weight;
  TensorView<const uint32_t, 1> offsets;
  TensorView<const uint8_t, 5> input_scale, weight_scale;
  PagedKVCacheCollection cache;
  TensorView<bfloat16, 2> output;
};

Status to_qkv_operands(const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* offsets,
                       const quantkv_tensor_t* weight, const quantkv_tensor_t* input_scale,
                       const quantkv_tensor_t* weight_scale, const quantkv_paged_kv_t* kv,
                       const quantkv_tensor_t* output, quantkv_block_format_t format,
                       QkvOperands* ops) {
  QUANTKV_RETURN_IF_ERROR(check_enum("format", format, QUANTKV_MXFP8));
  const std::initializer_list<quantkv_dtype_t> bytes = {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3};
  QUANTKV_RETURN_IF_ERROR(
      to_view(hidden_state, "hidden_state", "[M, row_bytes(K)]", bytes, &ops->hidden_state));
  QUANTKV_RETURN_IF_ERROR(
      to_view(offsets, "input_row_offsets", "[B + 1]", {QUANTKV_DTYPE_U32}, &ops->offsets));
  QUANTKV_RETURN_IF_ERROR(to_view(weight, "weight", "[N, row_bytes(K)]", bytes, &ops->weight));
  QUANTKV_RETURN_IF_ERROR(to_view(input_scale, "input_scale", "[M/128, Kb/4, 32, 4, 4]",
                                  {QUANTKV_DTYPE_U8}, &ops->input_scale));
  QUANTKV_RETURN_IF_ERROR(to_view(weight_scale, "weight_scale", "[N/128, Kb/4, 32, 4, 4]",
                                  {QUANTKV_DTYPE_U8}, &ops->weight_scale));
  QUANTKV_RETURN_IF_ERROR(to_collection(kv, "kv_collection", &ops->cache));
  return to_view(output, "output", "[M, q_dim]", {QUANTKV_DTYPE_BF16}, &ops->output);
}

}  // namespace

extern "C" {

quantkv_status_t quantkv_parse_mask(const char* text, quantkv_mask_t* mask) {
  return guarded([&]() -> Status {
    if (text == nullptr) return invalid_argument("text: pointer is null");
    if (mask == nullptr) return invalid_argument("mask: output pointer is null");
    MaskType parsed;
    QUANTKV_RETURN_IF_ERROR(parse_mask(text, &parsed));
    *mask = static_cast<quantkv_mask_t>(parsed);
    return Status::Ok();
  });
}

quantkv_status_t quantkv_quantize_dynamic_block_scaled(
    const quantkv_tensor_t* x, float global_scale, quantkv_block_format_t format,
    const quantkv_tensor_t* data, const quantkv_tensor_t* scales, const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("format", format, QUANTKV_MXFP8));
    TensorView<uint8_t, 2> d;
    TensorView<uint8_t, 5> s;
    QUANTKV_RETURN_IF_ERROR(
        to_view(data, "data", "[M, row_bytes(K)]", {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &d));
    QUANTKV_RETURN_IF_ERROR(
        to_view(scales, "scales", "[M/128, Kb/4, 32, 4, 4]", {QUANTKV_DTYPE_U8}, &s));
    const Context c = to_context(ctx);
    return with_float_or_bf16<2>(x, "x", "[M, K]", [&](auto view) {
      return quantize_dynamic_block_scaled(view, global_scale, static_cast<BlockFormat>(format), d,
                                           s, c);
    });
  });
}

quantkv_status_t quantkv_mla_indexer_ragged_float8_paged(
    const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q, const quantkv_tensor_t* q_s,
    const quantkv_tensor_t* input_row_offsets, const quantkv_paged_kv_t* k_collection,
    uint32_t layer_idx, quantkv_mask_t mask, const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("mask", mask, QUANTKV_MASK_CAUSAL));
    TensorView<int32_t, 2> out;
    TensorView<const float8_e4m3fn, 3> qv;
    TensorView<const float, 2> qs;
    TensorView<const uint32_t, 1> offs;
    PagedKVCacheCollection cache;
    QUANTKV_RETURN_IF_ERROR(
        to_view(output_indices, "output_indices", "[T, top_k]", {QUANTKV_DTYPE_I32}, &out));
    QUANTKV_RETURN_IF_ERROR(
        to_view(q, "q", "[T, H, D]", {QUANTKV_DTYPE_E4M3, QUANTKV_DTYPE_U8}, &qv));
    QUANTKV_RETURN_IF_ERROR(to_view(q_s, "q_s", "[T, H]", {QUANTKV_DTYPE_F32}, &qs));
    QUANTKV_RETURN_IF_ERROR(
        to_ragged_cache(input_row_offsets, k_collection, "k_collection", &offs, &cache));
    return mla_indexer_ragged_float8_paged(out, qv, qs, offs, cache, layer_idx,
                                           static_cast<MaskType>(mask), to_context(ctx));
  });
}

quantkv_status_t quantkv_indexer_k_store(const quantkv_tensor_t* k,
                                         const quantkv_tensor_t* input_row_offsets,
                                         const quantkv_paged_kv_t* k_collection, uint32_t layer_idx,
                                         quantkv_scale_mode_t scale_mode,
                                         const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    TensorView<const uint32_t, 1> offs;
    PagedKVCacheCollection cache;
    QUANTKV_RETURN_IF_ERROR(
        to_ragged_cache(input_row_offsets, k_collection, "k_collection", &offs, &cache));
    const Context c = to_context(ctx);
    return with_float_or_bf16<2>(k, "k", "[T, D]", [&](auto view) {
      return indexer_k_store(view, offs, cache, layer_idx, static_cast<ScaleMode>(scale_mode), c);
    });
  });
}

quantkv_status_t quantkv_indexer_q_prepare(
    const quantkv_tensor_t* q, const quantkv_tensor_t* weights, const quantkv_tensor_t* q_fp8,
    const quantkv_tensor_t* q_s, quantkv_scale_mode_t scale_mode, const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    TensorView<const float, 3> qv;
    TensorView<const float, 2> w;
    TensorView<float8_e4m3fn, 3> q8;
    TensorView<float, 2> qs;
    QUANTKV_RETURN_IF_ERROR(to_view(q, "q", "[T, H, D]", {QUANTKV_DTYPE_F32}, &qv));
    QUANTKV_RETURN_IF_ERROR(to_view(weights, "weights", "[T, H]", {QUANTKV_DTYPE_F32}, &w));
    QUANTKV_RETURN_IF_ERROR(
        to_view(q_fp8, "q_fp8", "[T, H, D]", {QUANTKV_DTYPE_E4M3, QUANTKV_DTYPE_U8}, &q8));
    QUANTKV_RETURN_IF_ERROR(to_view(q_s, "q_s", "[T, H]", {QUANTKV_DTYPE_F32}, &qs));
    return indexer_q_prepare(qv, w, q8, qs, static_cast<ScaleMode>(scale_mode), to_context(ctx));
  });
}

quantkv_status_t quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_tensor_t* weight, const quantkv_tensor_t* input_scale,
    const quantkv_tensor_t* weight_scale, float tensor_sf, const quantkv_paged_kv_t* kv_collection,
    uint32_t layer_idx, const quantkv_tensor_t* output, quantkv_block_format_t format,
    const quantkv_context_t* ctx) {
  return guarded([&] {
    QkvOperands o;
    QUANTKV_RETURN_IF_ERROR(to_qkv_operands(hidden_state, input_row_offsets, weight, input_scale,
                                            weight_scale, kv_collection, output, format, &o));
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        o.hidden_state, o.offsets, o.weight, o.input_scale, o.weight_scale, tensor_sf, o.cache,
        layer_idx, o.output, static_cast<BlockFormat>(format), to_context(ctx));
  });
}

quantkv_status_t quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_sections(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_tensor_t* weight, const quantkv_tensor_t* input_scale,
    const quantkv_tensor_t* weight_scale, quantkv_section_scales_t section_sf,
    const quantkv_paged_kv_t* kv_collection, uint32_t layer_idx, const quantkv_tensor_t* output,
    quantkv_block_format_t format, const quantkv_context_t* ctx) {
  return guarded([&] {
    QkvOperands o;
    QUANTKV_RETURN_IF_ERROR(to_qkv_operands(hidden_state, input_row_offsets, weight, input_scale,
                                            weight_scale, kv_collection, output, format, &o));
    const SectionScales sf{section_sf.q, section_sf.k, section_sf.v};
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        o.hidden_state, o.offsets, o.weight, o.input_scale, o.weight_scale, sf, o.cache, layer_idx,
        o.output, static_cast<BlockFormat>(format), to_context(ctx));
  });
}

quantkv_status_t quantkv_prepare_qkv_weights(const quantkv_tensor_t* weight,
                                             const quantkv_tensor_t* weight_scale,
                                             quantkv_block_format_t format,
                                             const quantkv_context_t* ctx,
                                             quantkv_prepared_qkv_weights_t** out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return invalid_argument("out: output pointer is null");
    *out = nullptr;
    QUANTKV_RETURN_IF_ERROR(check_enum("format", format, QUANTKV_MXFP8));
    TensorView<const uint8_t, 2> w;
    TensorView<const uint8_t, 5> ws;
    QUANTKV_RETURN_IF_ERROR(
        to_view(weight, "weight", "[N, row_bytes(K)]", {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &w));
    QUANTKV_RETURN_IF_ERROR(
        to_view(weight_scale, "weight_scale", "[N/128, Kb/4, 32, 4, 4]", {QUANTKV_DTYPE_U8}, &ws));
    auto holder = std::make_unique<quantkv_prepared_qkv_weights>();
    QUANTKV_RETURN_IF_ERROR(prepare_qkv_weights(w, ws, static_cast<BlockFormat>(format),
                                                &holder->weights, to_context(ctx)));
    *out = holder.release();
    return Status::Ok();
  });
}

void quantkv_prepared_qkv_weights_destroy(quantkv_prepared_qkv_weights_t* weights) {
  delete weights;
}

quantkv_status_t quantkv_prepared_qkv_weights_info(const quantkv_prepared_qkv_weights_t* weights,
                                                   int64_t* n, int64_t* k,
                                                   quantkv_block_format_t* format) {
  return guarded([&]() -> Status {
    if (weights == nullptr) return invalid_argument("weights: pointer is null");
    if (n) *n = weights->weights.n;
    if (k) *k = weights->weights.k;
    if (format) *format = static_cast<quantkv_block_format_t>(weights->weights.format);
    return Status::Ok();
  });
}

quantkv_status_t quantkv_generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4_prepared(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_prepared_qkv_weights_t* weight, const quantkv_tensor_t* input_scale,
    quantkv_section_scales_t section_sf, const quantkv_paged_kv_t* kv_collection,
    uint32_t layer_idx, const quantkv_tensor_t* output, const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (weight == nullptr) return invalid_argument("weight: prepared weights pointer is null");
    TensorView<const uint8_t, 2> hs;
    TensorView<const uint32_t, 1> offs;
    TensorView<const uint8_t, 5> sa;
    PagedKVCacheCollection cache;
    TensorView<bfloat16, 2> out;
    QUANTKV_RETURN_IF_ERROR(to_view(hidden_state, "hidden_state", "[M, row_bytes(K)]",
                                    {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &hs));
    QUANTKV_RETURN_IF_ERROR(
        to_view(input_row_offsets, "input_row_offsets", "[B + 1]", {QUANTKV_DTYPE_U32}, &offs));
    QUANTKV_RETURN_IF_ERROR(
        to_view(input_scale, "input_scale", "[M/128, Kb/4, 32, 4, 4]", {QUANTKV_DTYPE_U8}, &sa));
    QUANTKV_RETURN_IF_ERROR(to_collection(kv_collection, "kv_collection", &cache));
    QUANTKV_RETURN_IF_ERROR(to_view(output, "output", "[M, q_dim]", {QUANTKV_DTYPE_BF16}, &out));
    const SectionScales sf{section_sf.q, section_sf.k, section_sf.v};
    return generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hs, offs, weight->weights, sa, sf, cache, layer_idx, out, to_context(ctx));
  });
}

}  // extern "C"
