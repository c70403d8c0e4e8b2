// CUDA entry points of the fused QKV projection (SPEC §4) and of the block-scaled quantiser
// (SPEC §5): validation on the host (ragged metadata from the HostRagged copies), then one
// launch: the decode kernel for M <= 16 rows, the tiled kernel otherwise.
#if defined(QUANTKV_WITH_CUDA)
#include <cmath>

#include "cuda/host/cuda_validate.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::cuda {
namespace {

using detail::str;

Status check_format(BlockFormat format) {
  if (format != BlockFormat::kNVFP4 && format != BlockFormat::kMXFP4 &&
      format != BlockFormat::kMXFP8) {
    return invalid_argument("format: expected kNVFP4, kMXFP4 or kMXFP8, got " + str(int(format)));
  }
  return Status::Ok();
}

// K from the row width in bytes; K % SFV == 0.
Status k_from_row_bytes(const char* name, int64_t bytes, BlockFormat format, int64_t* k) {
  *k = format == BlockFormat::kMXFP8 ? bytes : 2 * bytes;
  const int sfv = sf_vector_size(format);
  if (*k % sfv != 0) {
    return invalid_argument(std::string(name) + ": expected K % " + str(sfv) + " == 0 for " +
                            block_format_name(format) + ", got K = " + str(*k));
  }
  return Status::Ok();
}

Status check_scales(const char* name, const TensorView<const uint8_t, 5>& s, int64_t rows,
                    int64_t kb_count) {
  const auto shape = swizzled_scale_shape(rows, kb_count);
  return check_contiguous(name, "[ceil(R/128), ceil(Kb/4), 32, 4, 4]", s,
                          {shape[0], shape[1], shape[2], shape[3], shape[4]});
}

// Rows of a data operand: innermost stride 1 (bytes of a row are contiguous).
Status check_rows(const char* name, const TensorView<const uint8_t, 2>& v, int64_t rows,
                  int64_t row_bytes) {
  QUANTKV_RETURN_IF_ERROR(check_shape(name, "[rows, row_bytes(K)]", v, {rows, row_bytes}));
  if (row_bytes > 1 && v.strides[1] != 1) {
    return invalid_argument(std::string(name) + ": expected contiguous bytes within a row "
                            "(stride 1), got stride " + str(v.strides[1]));
  }
  return Status::Ok();
}

bool vector_friendly(const TensorView<const uint8_t, 2>& v) {
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && (v.shape[0] <= 1 || v.strides[0] % 16 == 0);
}

Status fused_qkv(TensorView<const uint8_t, 2> hidden_state,
                 TensorView<const uint32_t, 1> input_row_offsets,
                 TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
                 TensorView<const uint8_t, 5> weight_scale, SectionScales sf,
                 const PagedKVCacheCollection& kv, uint32_t layer_idx,
                 TensorView<bfloat16, 2> output, BlockFormat format, const HostRagged& host,
                 const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(check_format(format));
  QUANTKV_RETURN_IF_ERROR(check_shape("hidden_state", "[M, row_bytes(K)]", hidden_state,
                                      {kAnyExtent, kAnyExtent}));
  const int64_t m = hidden_state.shape[0];
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(k_from_row_bytes("hidden_state", hidden_state.shape[1], format, &k));
  QUANTKV_RETURN_IF_ERROR(check_rows("hidden_state", hidden_state, m, hidden_state.shape[1]));
  QUANTKV_RETURN_IF_ERROR(check_shape("weight", "[N, row_bytes(K)]", weight,
                                      {kAnyExtent, hidden_state.shape[1]}));
  const int64_t n = weight.shape[0];
  QUANTKV_RETURN_IF_ERROR(check_rows("weight", weight, n, hidden_state.shape[1]));
  const int64_t kb_count = k / sf_vector_size(format);
  QUANTKV_RETURN_IF_ERROR(check_scales("input_scale", input_scale, m, kb_count));
  QUANTKV_RETURN_IF_ERROR(check_scales("weight_scale", weight_scale, n, kb_count));
  QUANTKV_RETURN_IF_ERROR(check_shape("output", "[M, q_dim]", output, {m, kAnyExtent}));
  const int64_t q_dim = output.shape[1];

  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(kv, "kv_collection"));
  if (kv.scales != nullptr) {
    return invalid_argument("kv_collection.scales: this op produces no per-token K/V scales; "
                            "expected a cache without a scales tensor");
  }
  if (int64_t(layer_idx) >= kv.num_layers) {
    return out_of_range("layer_idx: expected < kv_collection.num_layers = " + str(kv.num_layers) +
                        ", got " + str(layer_idx));
  }
  const int64_t kv_width = kv.num_heads * kv.head_size;
  if (n != q_dim + kv.kv_dim * kv_width) {
    return invalid_argument("weight: expected N = q_dim + kv_dim * num_kv_heads * head_size = " +
                            str(q_dim) + " + " + str(kv.kv_dim) + " * " + str(kv_width) + " = " +
                            str(q_dim + kv.kv_dim * kv_width) + ", got " + str(n));
  }
  for (const float v : {sf.q, sf.k, sf.v}) {
    if (!std::isfinite(v)) {
      return invalid_argument("tensor_sf: expected a finite GEMM factor, got " + std::to_string(v));
    }
    if (format == BlockFormat::kMXFP8 && v != 1.0f) {
      return invalid_argument("tensor_sf: MXFP8 carries all scaling in its e8m0 blocks, expected 1, "
                              "got " + std::to_string(v));
    }
  }
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("M", m));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("N", n));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("K", k));
  if (m > int64_t(65535) * 128) {  // grid.y of the tiled kernel
    return {StatusCode::kUnimplemented, "hidden_state: the CUDA backend supports M <= 65535 * 128 "
                                        "rows per call, got " + str(m)};
  }
  QUANTKV_RETURN_IF_ERROR(detail::validate_ragged(input_row_offsets, kv, host, m,
                                                  /*require_pages=*/false, "kv_collection"));
  if (m == 0) return Status::Ok();

  launch::QkvArgs a;
  a.a = hidden_state.data;
  a.a_stride = hidden_state.strides[0];
  a.w = weight.data;
  a.w_stride = weight.strides[0];
  a.a_scale = input_scale.data;
  a.w_scale = weight_scale.data;
  a.M = int32_t(m);
  a.N = int32_t(n);
  a.K = int32_t(k);
  a.format = int32_t(format);
  a.vector_loads = vector_friendly(hidden_state) && vector_friendly(weight);
  a.sf_q = sf.q;
  a.sf_k = sf.k;
  a.sf_v = sf.v;
  a.q_dim = int32_t(q_dim);
  a.kv_width = int32_t(kv_width);
  a.out = reinterpret_cast<uint16_t*>(output.data);
  a.out_stride0 = output.strides[0];
  a.out_stride1 = output.strides[1];
  a.kv = detail::paged_rows(kv, layer_idx);
  a.offs = input_row_offsets.data;
  a.batch = int32_t(kv.batch_size());
  return m <= launch::kQkvDecodeMaxRows ? launch::qkv_decode(a, ctx.cuda_stream)
                                        : launch::qkv_gemm(a, ctx.cuda_stream);
}

template <typename T>
Status quantize_impl(TensorView<const T, 2> x, float global_scale, BlockFormat format,
                     TensorView<uint8_t, 2> data, TensorView<uint8_t, 5> scales,
                     const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(check_format(format));
  QUANTKV_RETURN_IF_ERROR(check_shape("x", "[M, K]", x, {kAnyExtent, kAnyExtent}));
  const int64_t m = x.shape[0], k = x.shape[1];
  const int sfv = sf_vector_size(format);
  if (k % sfv != 0) {
    return invalid_argument("x: expected K % " + str(sfv) + " == 0 for " +
                            block_format_name(format) + ", got K = " + str(k));
  }
  if (format == BlockFormat::kNVFP4 && !(std::isfinite(global_scale) && global_scale > 0.0f)) {
    return invalid_argument("global_scale: expected a finite value > 0 for NVFP4, got " +
                            std::to_string(global_scale));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("data", "[M, row_bytes(K)]", data, {m, row_bytes(format, k)}));
  const auto shape = swizzled_scale_shape(m, k / sfv);
  QUANTKV_RETURN_IF_ERROR(check_contiguous("scales", "[ceil(M/128), ceil(Kb/4), 32, 4, 4]", scales,
                                           {shape[0], shape[1], shape[2], shape[3], shape[4]}));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("M", m));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("K", k));
  launch::QuantizeArgs a;
  a.x = x.data;
  a.x_bf16 = std::is_same_v<T, bfloat16>;
  a.x_stride0 = x.strides[0];
  a.x_stride1 = x.strides[1];
  a.M = int32_t(m);
  a.K = int32_t(k);
  a.format = int32_t(format);
  a.global_scale = global_scale;
  a.data = data.data;
  a.data_stride0 = data.strides[0];
  a.data_stride1 = data.strides[1];
  a.scales = scales.data;
  return launch::quantize(a, ctx.cuda_stream);
}

}  // namespace

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, float tensor_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output, BlockFormat format, const HostRagged& host,
    const Context& ctx) {
  return fused_qkv(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
                   SectionScales{tensor_sf, tensor_sf, tensor_sf}, kv_collection, layer_idx, output,
                   format, host, ctx);
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, SectionScales section_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output, BlockFormat format, const HostRagged& host,
    const Context& ctx) {
  return fused_qkv(hidden_state, input_row_offsets, weight, input_scale, weight_scale, section_sf,
                   kv_collection, layer_idx, output, format, host, ctx);
}

Status quantize_dynamic_block_scaled(TensorView<const float, 2> x, float global_scale,
                                     BlockFormat format, TensorView<uint8_t, 2> data,
                                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  return quantize_impl(x, global_scale, format, data, scales, ctx);
}
Status quantize_dynamic_block_scaled(TensorView<const bfloat16, 2> x, float global_scale,
                                     BlockFormat format, TensorView<uint8_t, 2> data,
                                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  return quantize_impl(x, global_scale, format, data, scales, ctx);
}

}  // namespace quantkv::cuda
#endif  // QUANTKV_WITH_CUDA
