// One validation per operation, shared by the CPU and CUDA entry points (see validate.hpp).
// The messages are the library's contract (docs/bad_inputs.md is checked against them).
#include "ops/validate.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "core/view_checks.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::ops {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// q [T, H, D], q_s [T, H], output [T, top_k].
Status validate_tensors(const TensorView<int32_t, 2>& out,
                        const TensorView<const float8_e4m3fn, 3>& q,
                        const TensorView<const float, 2>& q_s) {
  QUANTKV_RETURN_IF_ERROR(check_shape("q", "[T, H, D]", q, {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  if (H < 1) return invalid_argument("q: expected H = q.shape[1] >= 1, got " + str(H));
  if (D < 16 || D % 16 != 0) {
    return invalid_argument(
        "q: expected head dim D = q.shape[2] to be a positive multiple of 16, got " + str(D));
  }
  if (D > (int64_t(1) << 16) || H > (int64_t(1) << 16)) {
    return invalid_argument("q: expected H and D <= 65536, got shape " +
                            format_shape(q.shape.data(), 3));
  }
  if (T > 0 && q.strides[2] != 1) {
    return invalid_argument("q: expected the D dimension to be contiguous (stride 1), got stride " +
                            str(q.strides[2]));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("q_s", "[T, H]", q_s, {T, H}));
  QUANTKV_RETURN_IF_ERROR(check_shape("output_indices", "[T, top_k]", out, {T, kAnyExtent}));
  if (out.shape[1] < 1) {
    return invalid_argument("output_indices: expected top_k = output_indices.shape[1] >= 1, got " +
                            str(out.shape[1]));
  }
  if (T > 0 && out.strides[1] != 1) {
    return invalid_argument(
        "output_indices: expected the top_k dimension to be contiguous (stride 1), got stride " +
        str(out.strides[1]));
  }
  return check_distinct_elements("output_indices", out);
}

// An e4m3 cache of one head of size D, with one float scale per token. D comes from q's or
// from k's shape (`d_from_k`); a head_size mismatch names that argument's side.
Status validate_k_cache(const PagedKVCacheCollection& c, uint32_t layer_idx, int64_t D,
                        bool d_from_k) {
  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(c, "k_collection"));
  if (c.dtype != DType::kE4M3) {
    return invalid_argument(std::string("k_collection.dtype: expected float8_e4m3fn, got ") +
                            dtype_name(c.dtype));
  }
  if (c.num_heads != 1)
    return invalid_argument("k_collection.num_heads: expected 1, got " + str(c.num_heads));
  if (c.head_size != D && d_from_k) {
    return invalid_argument("k: expected D = k.shape[1] == k_collection.head_size = " +
                            str(c.head_size) + ", got " + str(D));
  }
  if (c.head_size != D) {
    return invalid_argument("k_collection.head_size: expected D = q.shape[2] = " + str(D) +
                            ", got " + str(c.head_size));
  }
  if (c.scales == nullptr) {
    return invalid_argument("k_collection.scales: expected per-token float scales, got null");
  }
  if (c.scale_granularity < D) {
    return invalid_argument("k_collection.scale_granularity: expected >= head_size = " + str(D) +
                            " (one scale per token), got " + str(c.scale_granularity));
  }
  if (int64_t(layer_idx) >= c.num_layers) {
    return out_of_range("layer_idx: expected < k_collection.num_layers = " + str(c.num_layers) +
                        ", got " + str(layer_idx));
  }
  return Status::Ok();
}

// K from the row bytes of `view`, checked against SF_VECTOR_SIZE.
Status derive_k(BlockFormat f, int64_t rb, const char* name, int64_t* k) {
  *k = f == BlockFormat::kMXFP8 ? rb : rb * 2;
  const int sfv = sf_vector_size(f);
  if (*k <= 0 || *k % sfv != 0) {
    return invalid_argument(std::string(name) + ": expected K (= " +
                            (f == BlockFormat::kMXFP8 ? "row bytes" : "2 * row bytes") +
                            ") to be a positive multiple of SF_VECTOR_SIZE = " + str(sfv) +
                            " for " + block_format_name(f) + ", got K = " + str(*k));
  }
  return Status::Ok();
}

Status check_rows(const char* name, const TensorView<const uint8_t, 2>& v, int64_t rows,
                  int64_t rb) {
  QUANTKV_RETURN_IF_ERROR(check_shape(name, "[rows, row_bytes(K)]", v, {rows, rb}));
  if (v.shape[1] > 1 && v.strides[1] != 1) {
    return invalid_argument(std::string(name) + ": expected unit stride along a row, got " +
                            str(v.strides[1]));
  }
  return Status::Ok();
}

Status check_scales(const char* name, const TensorView<const uint8_t, 5>& s, int64_t rows,
                    int64_t kb_count) {
  const auto want = swizzled_scale_shape(rows, kb_count);
  return check_contiguous<const uint8_t, 5>(name, "[ceil(R/128), ceil(Kb/4), 32, 4, 4]", s, want);
}

Status check_factor(const char* name, float v, BlockFormat f) {
  if (!std::isfinite(v)) {
    return invalid_argument(std::string(name) + ": expected a finite GEMM factor, got " +
                            std::to_string(v));
  }
  if (f == BlockFormat::kMXFP8 && v != 1.0f) {
    return invalid_argument(std::string(name) +
                            ": MXFP8 carries all scaling in its e8m0 blocks, expected 1, got " +
                            std::to_string(v));
  }
  return Status::Ok();
}

template <typename T>
Status validate_quantize_impl(const TensorView<const T, 2>& x, float g, BlockFormat f,
                              const TensorView<uint8_t, 2>& data,
                              const TensorView<uint8_t, 5>& scales) {
  if (!valid_block_format(f)) {
    return invalid_argument("format: expected NVFP4, MXFP4 or MXFP8, got " + str(int(f)));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("x", "[M, K]", x, {kAnyExtent, kAnyExtent}));
  const int64_t m = x.shape[0], k = x.shape[1];
  const int sfv = sf_vector_size(f);
  if (k % sfv != 0) {
    return invalid_argument("x: expected K to be a multiple of SF_VECTOR_SIZE = " + str(sfv) +
                            " for " + block_format_name(f) + ", got K = " + str(k));
  }
  if (f == BlockFormat::kNVFP4 && !(std::isfinite(g) && g > 0.0f)) {
    return invalid_argument("global_scale: expected a finite g = 448*6 / amax > 0 for NVFP4, got " +
                            std::to_string(g));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("data", "[M, row_bytes(K)]", data, {m, row_bytes(f, k)}));
  if (data.shape[1] > 1 && data.strides[1] != 1) {
    return invalid_argument("data: expected unit stride along a row, got " + str(data.strides[1]));
  }
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("data", data));  // scales are contiguous
  const int64_t kb_count = k / sfv;
  return check_contiguous<uint8_t, 5>("scales", "[ceil(M/128), ceil(Kb/4), 32, 4, 4]", scales,
                                      swizzled_scale_shape(m, kb_count));
}

Status validate_scale_mode(ScaleMode mode) {
  if (mode != ScaleMode::kFloat && mode != ScaleMode::kPowerOfTwo) {
    return invalid_argument("scale_mode: expected kFloat or kPowerOfTwo, got " + str(int(mode)));
  }
  return Status::Ok();
}

template <typename T>
Status validate_k_store_impl(const TensorView<const T, 2>& k, const PagedKVCacheCollection& c,
                             uint32_t layer_idx, ScaleMode mode) {
  QUANTKV_RETURN_IF_ERROR(check_shape("k", "[T, D]", k, {kAnyExtent, kAnyExtent}));
  QUANTKV_RETURN_IF_ERROR(validate_k_cache(c, layer_idx, k.shape[1], /*d_from_k=*/true));
  return validate_scale_mode(mode);
}

// k [T, D] and the engines' buffer (one layer, one head of D, one scale per token).
template <typename T>
Status validate_k_store_impl(const TensorView<const T, 2>& k, const EngineIndexerKCache& c,
                             ScaleMode mode) {
  QUANTKV_RETURN_IF_ERROR(check_shape("k", "[T, D]", k, {kAnyExtent, kAnyExtent}));
  QUANTKV_RETURN_IF_ERROR(validate_engine_k_cache(c, "k_cache"));
  if (c.head_size != k.shape[1]) {
    return invalid_argument("k: expected D = k.shape[1] == k_cache.head_size = " +
                            str(c.head_size) + ", got " + str(k.shape[1]));
  }
  return validate_scale_mode(mode);
}

Status validate_mask(MaskType mask) {
  if (mask != MaskType::kNull && mask != MaskType::kCausal) {
    return invalid_argument("mask: expected MaskType::kNull or MaskType::kCausal, got " +
                            str(int(mask)));
  }
  return Status::Ok();
}

}  // namespace

Status validate_indexer(const TensorView<int32_t, 2>& output_indices,
                        const TensorView<const float8_e4m3fn, 3>& q,
                        const TensorView<const float, 2>& q_s,
                        const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                        MaskType mask) {
  QUANTKV_RETURN_IF_ERROR(validate_tensors(output_indices, q, q_s));
  QUANTKV_RETURN_IF_ERROR(validate_mask(mask));
  return validate_k_cache(k_collection, layer_idx, q.shape[2], /*d_from_k=*/false);
}

Status validate_indexer(const TensorView<int32_t, 2>& output_indices,
                        const TensorView<const float8_e4m3fn, 3>& q,
                        const TensorView<const float, 2>& q_s, const EngineIndexerKCache& k_cache,
                        MaskType mask) {
  QUANTKV_RETURN_IF_ERROR(validate_tensors(output_indices, q, q_s));
  QUANTKV_RETURN_IF_ERROR(validate_mask(mask));
  QUANTKV_RETURN_IF_ERROR(validate_engine_k_cache(k_cache, "k_cache"));
  if (k_cache.head_size != q.shape[2]) {
    return invalid_argument("k_cache.head_size: expected D = q.shape[2] = " + str(q.shape[2]) +
                            ", got " + str(k_cache.head_size));
  }
  return Status::Ok();
}

Status validate_k_store(const TensorView<const float, 2>& k,
                        const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                        ScaleMode mode) {
  return validate_k_store_impl(k, k_collection, layer_idx, mode);
}
Status validate_k_store(const TensorView<const bfloat16, 2>& k,
                        const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                        ScaleMode mode) {
  return validate_k_store_impl(k, k_collection, layer_idx, mode);
}
Status validate_k_store(const TensorView<const float, 2>& k, const EngineIndexerKCache& k_cache,
                        ScaleMode mode) {
  return validate_k_store_impl(k, k_cache, mode);
}
Status validate_k_store(const TensorView<const bfloat16, 2>& k, const EngineIndexerKCache& k_cache,
                        ScaleMode mode) {
  return validate_k_store_impl(k, k_cache, mode);
}

bool valid_block_format(BlockFormat f) {
  return f == BlockFormat::kNVFP4 || f == BlockFormat::kMXFP4 || f == BlockFormat::kMXFP8;
}

Status validate_qkv_weight(const TensorView<const uint8_t, 2>& weight,
                           const TensorView<const uint8_t, 5>& scale, BlockFormat format,
                           int64_t* k_out) {
  if (!valid_block_format(format)) {
    return invalid_argument("format: expected NVFP4, MXFP4 or MXFP8, got " + str(int(format)));
  }
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(derive_k(format, weight.shape[1], "weight", &k));
  QUANTKV_RETURN_IF_ERROR(check_rows("weight", weight, kAnyExtent, weight.shape[1]));
  QUANTKV_RETURN_IF_ERROR(
      check_scales("weight_scale", scale, weight.shape[0], k / sf_vector_size(format)));
  *k_out = k;
  return Status::Ok();
}

namespace {
// Everything after the activations: output bf16 [m, q_dim], the factors (checked as those of
// `factor_format`), the cache's geometry and layer_idx, and N.
Status validate_qkv_outputs(BlockFormat factor_format, int64_t m, int64_t n,
                            const SectionScales& sf, bool single_sf,
                            const PagedKVCacheCollection& kv, uint32_t layer_idx,
                            const TensorView<bfloat16, 2>& output) {
  QUANTKV_RETURN_IF_ERROR(check_shape("output", "[M, q_dim]", output, {m, kAnyExtent}));
  if (output.shape[1] > 1 && output.strides[1] != 1) {
    return invalid_argument("output: expected unit stride along a row, got " +
                            str(output.strides[1]));
  }
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("output", output));
  if (single_sf) {
    QUANTKV_RETURN_IF_ERROR(check_factor("tensor_sf", sf.q, factor_format));
  } else {
    QUANTKV_RETURN_IF_ERROR(check_factor("section_sf.q", sf.q, factor_format));
    QUANTKV_RETURN_IF_ERROR(check_factor("section_sf.k", sf.k, factor_format));
    QUANTKV_RETURN_IF_ERROR(check_factor("section_sf.v", sf.v, factor_format));
  }
  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(kv, "kv_collection"));
  if (kv.scales != nullptr) {
    return invalid_argument(
        "kv_collection.scales: expected a cache without a scales tensor (this op stores no "
        "per-token K/V scales), got one with scale_granularity " +
        str(kv.scale_granularity));
  }
  const int64_t q_dim = output.shape[1];
  const int64_t kv_width = kv.num_heads * kv.head_size;
  if (n != q_dim + kv.kv_dim * kv_width) {
    return invalid_argument("weight: expected N = q_dim + " + str(kv.kv_dim) +
                            " * num_kv_heads * head_size = " + str(q_dim) + " + " + str(kv.kv_dim) +
                            " * " + str(kv.num_heads) + " * " + str(kv.head_size) + " = " +
                            str(q_dim + kv.kv_dim * kv_width) + " rows, got " + str(n));
  }
  if (int64_t(layer_idx) >= kv.num_layers) {
    return out_of_range("layer_idx: expected < num_layers = " + str(kv.num_layers) + ", got " +
                        str(layer_idx));
  }
  return Status::Ok();
}
}  // namespace

Status validate_qkv_call(const TensorView<const uint8_t, 2>& hidden, BlockFormat format, int64_t n,
                         int64_t k, const TensorView<const uint8_t, 5>& input_scale,
                         const SectionScales& sf, bool single_sf, const PagedKVCacheCollection& kv,
                         uint32_t layer_idx, const TensorView<bfloat16, 2>& output) {
  const int64_t rb = row_bytes(format, k);
  if (hidden.shape[1] != rb) {
    return invalid_argument("hidden_state: expected " + str(rb) + " bytes per row (K = " + str(k) +
                            " of the weight, " + block_format_name(format) + "), got shape " +
                            format_shape(hidden.shape.data(), 2));
  }
  QUANTKV_RETURN_IF_ERROR(check_rows("hidden_state", hidden, kAnyExtent, rb));
  const int64_t m = hidden.shape[0];
  QUANTKV_RETURN_IF_ERROR(check_scales("input_scale", input_scale, m, k / sf_vector_size(format)));
  return validate_qkv_outputs(format, m, n, sf, single_sf, kv, layer_idx, output);
}

Status validate_qkv_weight_only_call(const TensorView<const bfloat16, 2>& hidden, int64_t n,
                                     int64_t k, const SectionScales& sf,
                                     const PagedKVCacheCollection& kv, uint32_t layer_idx,
                                     const TensorView<bfloat16, 2>& output) {
  QUANTKV_RETURN_IF_ERROR(check_shape("hidden_state", "[M, K]", hidden, {kAnyExtent, k}));
  if (hidden.shape[1] > 1 && hidden.strides[1] != 1) {
    return invalid_argument("hidden_state: expected unit stride along a row, got " +
                            str(hidden.strides[1]));
  }
  // The factors are the weight's own (1 / g_w), so MXFP8's "must be 1" does not apply.
  return validate_qkv_outputs(BlockFormat::kNVFP4, hidden.shape[0], n, sf, /*single_sf=*/false, kv,
                              layer_idx, output);
}

Status validate_quantize(const TensorView<const float, 2>& x, float global_scale,
                         BlockFormat format, const TensorView<uint8_t, 2>& data,
                         const TensorView<uint8_t, 5>& scales) {
  return validate_quantize_impl(x, global_scale, format, data, scales);
}
Status validate_quantize(const TensorView<const bfloat16, 2>& x, float global_scale,
                         BlockFormat format, const TensorView<uint8_t, 2>& data,
                         const TensorView<uint8_t, 5>& scales) {
  return validate_quantize_impl(x, global_scale, format, data, scales);
}

}  // namespace quantkv::ops
