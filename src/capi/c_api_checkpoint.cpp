// The C API of the checkpoint loaders and the weight-only fused QKV.
#include <memory>

#include "capi/c_api_internal.hpp"
#include "quantkv/checkpoint.hpp"

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

namespace {
quantkv_section_scales_t to_c(const SectionScales& s) { return {s.q, s.k, s.v}; }
}  // namespace

quantkv_status_t quantkv_fused_qkv_matmul_weight_only(
    const quantkv_tensor_t* hidden_state, const quantkv_tensor_t* input_row_offsets,
    const quantkv_prepared_qkv_weights_t* weight, quantkv_section_scales_t section_sf,
    const quantkv_paged_kv_t* kv_collection, uint32_t layer_idx, const quantkv_tensor_t* output,
    const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (weight == nullptr) return invalid_argument("weight: prepared weights pointer is null");
    TensorView<const bfloat16, 2> hs;
    TensorView<const uint32_t, 1> offs;
    PagedKVCacheCollection cache;
    TensorView<bfloat16, 2> out;
    QUANTKV_RETURN_IF_ERROR(
        to_view(hidden_state, "hidden_state", "[M, K]", {QUANTKV_DTYPE_BF16}, &hs));
    QUANTKV_RETURN_IF_ERROR(
        to_view(input_row_offsets, "input_row_offsets", "[B + 1]", {QUANTKV_DTYPE_U32}, &offs));
    QUANTKV_RETURN_IF_ERROR(to_collection(kv_collection, "kv_collection", &cache));
    QUANTKV_RETURN_IF_ERROR(to_view(output, "output", "[M, q_dim]", {QUANTKV_DTYPE_BF16}, &out));
    return fused_qkv_matmul_weight_only(hs, offs, weight->weights,
                                        SectionScales{section_sf.q, section_sf.k, section_sf.v},
                                        cache, layer_idx, out, to_context(ctx));
  });
}

namespace {
// Opens `path` (a file, an index or a directory), runs `load` on it and hands the prepared
// weights and `info` to the caller; nothing is written when it fails.
template <typename Load>
quantkv_status_t load_checkpoint(const char* path, quantkv_prepared_qkv_weights_t** weights,
                                 quantkv_qkv_checkpoint_info_t* info, Load&& load) {
  return guarded([&]() -> Status {
    if (weights == nullptr) return invalid_argument("weights: output pointer is null");
    *weights = nullptr;
    if (path == nullptr) return invalid_argument("path: pointer is null");
    SafetensorsCheckpoint ckpt;
    QUANTKV_RETURN_IF_ERROR(SafetensorsCheckpoint::open(path, &ckpt));
    QkvCheckpointWeights w;
    QUANTKV_RETURN_IF_ERROR(load(ckpt, &w));
    if (info != nullptr) {
      info->format = static_cast<quantkv_checkpoint_format_t>(w.format);
      info->q_rows = w.q_rows;
      info->k_rows = w.k_rows;
      info->v_rows = w.v_rows;
      info->weight_factor = to_c(w.weight_factor);
      info->gemm_scales = to_c(w.gemm_scales());
      info->input_global = w.input_global;
    }
    auto holder = std::make_unique<quantkv_prepared_qkv_weights>();
    holder->weights = std::move(w.weights);
    *weights = holder.release();
    return Status::Ok();
  });
}
}  // namespace

quantkv_status_t quantkv_load_qkv_checkpoint(const char* path, const char* prefix,
                                             const quantkv_context_t* ctx,
                                             quantkv_prepared_qkv_weights_t** weights,
                                             quantkv_qkv_checkpoint_info_t* info) {
  return load_checkpoint(path, weights, info,
                         [&](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
                           if (prefix == nullptr)
                             return invalid_argument("prefix: pointer is null");
                           return load_qkv_weights(c, prefix, w, to_context(ctx));
                         });
}

quantkv_status_t quantkv_load_fused_qkv_checkpoint(const char* path, const char* projection,
                                                   int64_t q_rows, int64_t k_rows, int64_t v_rows,
                                                   const quantkv_context_t* ctx,
                                                   quantkv_prepared_qkv_weights_t** weights,
                                                   quantkv_qkv_checkpoint_info_t* info) {
  return load_checkpoint(
      path, weights, info, [&](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
        if (projection == nullptr) return invalid_argument("projection: pointer is null");
        return load_fused_qkv_weights(c, projection, QkvSections{q_rows, k_rows, v_rows}, w,
                                      to_context(ctx));
      });
}
