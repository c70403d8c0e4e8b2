// One validation per operation, shared by the CPU and CUDA entry points (see validate.hpp).
// The messages are the library's contract (docs/bad_inputs.md is checked against them).
#include "ops/validate.hpp"

#include <cmath>
#include <cstdint>
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

// An output [m, n] with unit stride along a row and one element per position.
template <typename T>
Status check_output_rows(const char* name, const TensorView<T, 2>& y, int64_t m, int64_t n) {
  QUANTKV_RETURN_IF_ERROR(check_shape(name, "[M, N]", y, {m, n}));
  if (m > 0 && n > 1 && y.strides[1] != 1) {
    return invalid_argument(std::string(name) + ": expected unit stride along a row, got " +
                            str(y.strides[1]));
  }
  return check_distinct_elements(name, y);
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
  if (v.shape[0] > 0 && v.shape[1] > 1 && v.strides[1] != 1) {
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
  if (data.shape[0] > 0 && data.shape[1] > 1 && data.strides[1] != 1) {
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
  if (c.fp4() && mode != ScaleMode::kPowerOfTwo) {
    return invalid_argument(std::string("scale_mode: the ") + index_k_format_name(c.format) +
                            " K cache chooses its own block scales (mxfp4: power-of-two, as "
                            "ue8m0): expected ScaleMode::kPowerOfTwo (the default), got " +
                            str(int(mode)));
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
  if (output.shape[0] > 0 && output.shape[1] > 1 && output.strides[1] != 1) {
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
  if (hidden.shape[0] > 0 && hidden.shape[1] > 1 && hidden.strides[1] != 1) {
    return invalid_argument("hidden_state: expected unit stride along a row, got " +
                            str(hidden.strides[1]));
  }
  // The factors are the weight's own (1 / g_w), so MXFP8's "must be 1" does not apply.
  return validate_qkv_outputs(BlockFormat::kNVFP4, hidden.shape[0], n, sf, /*single_sf=*/false, kv,
                              layer_idx, output);
}

Status validate_weight_source(const WeightSource& source, int64_t* k_out) {
  const BlockFormat format = source.format;
  if (!valid_block_format(format)) {
    return invalid_argument("source.format: expected NVFP4, MXFP4 or MXFP8, got " +
                            str(int(format)));
  }
  const bool swizzled = given(source.scale), rows = given(source.scale_rows);
  if (swizzled == rows) {
    return invalid_argument(
        std::string("source.scale, source.scale_rows: expected exactly one of the 5-D swizzled "
                    "scales and the row-major [N, K / SF_VECTOR_SIZE] scales, got ") +
        (swizzled ? "both" : "neither"));
  }
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(derive_k(format, source.data.shape[1], "source.data", &k));
  QUANTKV_RETURN_IF_ERROR(check_rows("source.data", source.data, kAnyExtent, source.data.shape[1]));
  const int64_t n = source.data.shape[0], kb_count = k / sf_vector_size(format);
  if (swizzled) {
    QUANTKV_RETURN_IF_ERROR(check_scales("source.scale", source.scale, n, kb_count));
  } else {
    QUANTKV_RETURN_IF_ERROR(check_shape("source.scale_rows", "[N, K / SF_VECTOR_SIZE]",
                                        source.scale_rows, {n, kb_count}));
    if (n > 0 && kb_count > 1 && source.scale_rows.strides[1] != 1) {
      return invalid_argument("source.scale_rows: expected unit stride along a row, got " +
                              str(source.scale_rows.strides[1]));
    }
  }
  *k_out = k;
  return Status::Ok();
}

Status validate_linear(const LinearArgs& a, int64_t* m_out) {
  if (a.weight == nullptr) return invalid_argument("weight: pointer is null");
  const PreparedWeights& w = *a.weight;
  const int64_t n = w.n, k = w.k;
  const bool quantised = given(a.x), bf16 = given(a.x_bf16);
  if (quantised == bf16) {
    return invalid_argument(
        std::string("x, x_bf16: expected exactly one of the quantised activations x (with "
                    "x_scale) and the bf16 activations x_bf16, got ") +
        (quantised ? "both" : "neither"));
  }
  int64_t m = 0;
  if (quantised) {
    const int64_t rb = row_bytes(w.format, k);
    if (a.x.shape[1] != rb) {
      return invalid_argument("x: expected " + str(rb) + " bytes per row (K = " + str(k) +
                              " of the weight, " + block_format_name(w.format) + "), got shape " +
                              format_shape(a.x.shape.data(), 2));
    }
    QUANTKV_RETURN_IF_ERROR(check_rows("x", a.x, kAnyExtent, rb));
    m = a.x.shape[0];
    QUANTKV_RETURN_IF_ERROR(check_scales("x_scale", a.x_scale, m, k / sf_vector_size(w.format)));
  } else {
    if (given(a.x_scale)) {
      return invalid_argument("x_scale: expected none with bf16 activations (x_bf16), got shape " +
                              format_shape(a.x_scale.shape.data(), 5));
    }
    QUANTKV_RETURN_IF_ERROR(check_shape("x_bf16", "[M, K]", a.x_bf16, {kAnyExtent, k}));
    if (a.x_bf16.shape[0] > 0 && k > 1 && a.x_bf16.strides[1] != 1) {
      return invalid_argument("x_bf16: expected unit stride along a row, got " +
                              str(a.x_bf16.strides[1]));
    }
    m = a.x_bf16.shape[0];
  }
  if (!std::isfinite(a.alpha)) {
    return invalid_argument("alpha: expected a finite GEMM factor, got " + std::to_string(a.alpha));
  }
  if (given(a.column_alpha)) {
    QUANTKV_RETURN_IF_ERROR(check_contiguous("column_alpha", "[N]", a.column_alpha, {n}));
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(a.column_alpha.data[i])) {
        return invalid_argument("column_alpha: expected finite GEMM factors, got " +
                                std::to_string(a.column_alpha.data[i]) + " at column " + str(i));
      }
    }
  }
  if (given(a.bias) && given(a.bias_bf16)) {
    return invalid_argument("bias, bias_bf16: expected at most one bias, got both");
  }
  if (given(a.bias)) QUANTKV_RETURN_IF_ERROR(check_contiguous("bias", "[N]", a.bias, {n}));
  if (given(a.bias_bf16)) {
    QUANTKV_RETURN_IF_ERROR(check_contiguous("bias_bf16", "[N]", a.bias_bf16, {n}));
  }
  const bool y16 = given(a.y), y32 = given(a.y_f32);
  if (y16 == y32) {
    return invalid_argument(std::string("y, y_f32: expected exactly one output (bf16 y or fp32 "
                                        "y_f32), got ") +
                            (y16 ? "both" : "neither"));
  }
  if (y16) {
    QUANTKV_RETURN_IF_ERROR(check_output_rows("y", a.y, m, n));
  } else {
    QUANTKV_RETURN_IF_ERROR(check_output_rows("y_f32", a.y_f32, m, n));
  }
  *m_out = m;
  return Status::Ok();
}

// ---- the fused experts
namespace {

// An optional per-expert factor vector: [E] finite (a global scale: > 0 for NVFP4, 1 for MX
// formats, which have none), or empty.
Status check_expert_factors(const char* name, const TensorView<const float, 1>& v, int64_t experts,
                            bool global, BlockFormat f) {
  if (!given(v)) return Status::Ok();
  QUANTKV_RETURN_IF_ERROR(check_shape(name, "[E]", v, {experts}));
  for (int64_t e = 0; e < experts; ++e) {
    const float x = v(e);
    const bool nvfp4 = f == BlockFormat::kNVFP4;
    const bool ok = !global ? std::isfinite(x) : nvfp4 ? std::isfinite(x) && x > 0.0f : x == 1.0f;
    if (!ok) {
      const char* want = !global ? "a finite factor"
                         : nvfp4 ? "a finite global scale > 0"
                                 : "1 (MX formats have no global scale)";
      return invalid_argument(std::string(name) + ": expected " + want + ", got " +
                              std::to_string(x) + " at expert " + str(e));
    }
  }
  return Status::Ok();
}

// An optional bias [E, cols] with unit stride along a row.
Status check_expert_bias(const char* name, const char* dims, const TensorView<const float, 2>& b,
                         int64_t experts, int64_t cols) {
  if (!given(b)) return Status::Ok();
  QUANTKV_RETURN_IF_ERROR(check_shape(name, dims, b, {experts, cols}));
  if (cols > 1 && b.strides[1] != 1) {
    return invalid_argument(std::string(name) + ": expected unit stride along a row, got " +
                            str(b.strides[1]));
  }
  return Status::Ok();
}

}  // namespace

Status validate_experts_source(const ExpertsSource& s, int64_t* hidden_out, int64_t* inter_out) {
  const BlockFormat f = s.format;
  if (!valid_block_format(f)) {
    return invalid_argument("source.format: expected NVFP4, MXFP4 or MXFP8, got " + str(int(f)));
  }
  const int sfv = sf_vector_size(f);
  QUANTKV_RETURN_IF_ERROR(check_shape("source.w13", "[E, 2I, row_bytes(H)]", s.w13,
                                      {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t experts = s.w13.shape[0], two_i = s.w13.shape[1];
  if (experts <= 0) {
    return invalid_argument("source.w13: expected at least one expert, got shape [" + str(experts) +
                            ", ...]");
  }
  if (two_i <= 0 || two_i % 2 != 0) {
    return invalid_argument("source.w13: expected 2I rows (gate and up) with I > 0, got " +
                            str(two_i));
  }
  const int64_t inter = two_i / 2;
  int64_t hidden = 0;
  QUANTKV_RETURN_IF_ERROR(derive_k(f, s.w13.shape[2], "source.w13", &hidden));
  if (inter % sfv != 0) {
    return invalid_argument("source.w13: expected I a multiple of SF_VECTOR_SIZE = " + str(sfv) +
                            " for " + block_format_name(f) + ", got I = " + str(inter));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("source.w13_scale", "[E, 2I, H / SF_VECTOR_SIZE]",
                                      s.w13_scale, {experts, two_i, hidden / sfv}));
  QUANTKV_RETURN_IF_ERROR(check_shape("source.w2", "[E, H, row_bytes(I)]", s.w2,
                                      {experts, hidden, row_bytes(f, inter)}));
  QUANTKV_RETURN_IF_ERROR(check_shape("source.w2_scale", "[E, H, I / SF_VECTOR_SIZE]", s.w2_scale,
                                      {experts, hidden, inter / sfv}));
  QUANTKV_RETURN_IF_ERROR(check_expert_factors("source.w13_alpha", s.w13_alpha, experts, false, f));
  QUANTKV_RETURN_IF_ERROR(check_expert_factors("source.w2_alpha", s.w2_alpha, experts, false, f));
  QUANTKV_RETURN_IF_ERROR(check_expert_factors("source.w3_alpha", s.w3_alpha, experts, false, f));
  QUANTKV_RETURN_IF_ERROR(check_expert_factors("source.x_global", s.x_global, experts, true, f));
  QUANTKV_RETURN_IF_ERROR(check_expert_factors("source.h_global", s.h_global, experts, true, f));
  *hidden_out = hidden;
  *inter_out = inter;
  return Status::Ok();
}

Status validate_fused_experts(const FusedExpertsArgs& a) {
  if (a.experts == nullptr) return invalid_argument("experts: pointer is null");
  const PreparedExperts& ex = *a.experts;
  const int64_t experts = ex.num_experts(), hidden = ex.hidden(), inter = ex.intermediate();
  QUANTKV_RETURN_IF_ERROR(check_shape("x", "[T, H]", a.x, {kAnyExtent, hidden}));
  const int64_t t = a.x.shape[0];
  if (t > 0 && hidden > 1 && a.x.strides[1] != 1) {
    return invalid_argument("x: expected unit stride along a row, got " + str(a.x.strides[1]));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("topk_ids", "[T, k]", a.topk_ids, {t, kAnyExtent}));
  const int64_t k = a.topk_ids.shape[1];
  QUANTKV_RETURN_IF_ERROR(check_shape("topk_weights", "[T, k]", a.topk_weights, {t, k}));
  // ids are int32: an offset beyond int32's range selects nothing, and id - offset must not wrap.
  if (a.expert_offset < INT32_MIN || a.expert_offset > INT32_MAX) {
    return invalid_argument("expert_offset: expected a value in int32's range, got " +
                            str(a.expert_offset));
  }
  if (a.gate_up != GateUpLayout::kHalves && a.gate_up != GateUpLayout::kInterleaved) {
    return invalid_argument("gate_up: expected kHalves or kInterleaved, got " +
                            str(int(a.gate_up)));
  }
  if (a.activation != MoeActivation::kSiluGated && a.activation != MoeActivation::kSwigluOai) {
    return invalid_argument("activation: expected kSiluGated or kSwigluOai, got " +
                            str(int(a.activation)));
  }
  if (a.activation == MoeActivation::kSwigluOai &&
      (!std::isfinite(a.swiglu_alpha) || !std::isfinite(a.swiglu_limit) ||
       !(a.swiglu_limit > 0.0f))) {
    return invalid_argument(
        "swiglu_alpha, swiglu_limit: expected finite values and a limit > 0, "
        "got " +
        std::to_string(a.swiglu_alpha) + ", " + std::to_string(a.swiglu_limit));
  }
  QUANTKV_RETURN_IF_ERROR(check_expert_bias("w13_bias", "[E, 2I]", a.w13_bias, experts, 2 * inter));
  QUANTKV_RETURN_IF_ERROR(check_expert_bias("w2_bias", "[E, H]", a.w2_bias, experts, hidden));
  const bool y16 = given(a.y), y32 = given(a.y_f32);
  if (y16 == y32) {
    return invalid_argument(std::string("y, y_f32: expected exactly one output (bf16 y or fp32 "
                                        "y_f32), got ") +
                            (y16 ? "both" : "neither"));
  }
  return y16 ? check_output_rows("y", a.y, t, hidden)
             : check_output_rows("y_f32", a.y_f32, t, hidden);
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
