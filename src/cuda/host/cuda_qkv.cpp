// CUDA entry points of the fused QKV projection (contract §4) and of the block-scaled quantiser
// (contract §5): the shared validation (ops/validate.hpp), the CUDA limits, the ragged metadata
// from the HostRagged copies, then one launch: the decode kernel for M <= 16 rows, the tiled
// kernel otherwise.
#if defined(QUANTKV_WITH_CUDA)
#include <cmath>

#include "cuda/host/cuda_validate.hpp"
#include "ops/validate.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::cuda {
namespace {

using detail::str;

bool vector_friendly(const TensorView<const uint8_t, 2>& v) {
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 &&
         (v.shape[0] <= 1 || v.strides[0] % 16 == 0);
}
// The decode kernel's vector variant loads an NVFP4 scale pair as one 16-bit word (its offset
// in the 5-D layout is even).
bool pair_friendly(const TensorView<const uint8_t, 5>& scales) {
  return reinterpret_cast<uintptr_t>(scales.data) % 2 == 0;
}

// The kernels count k in int32 and step ahead of it (the decode kernel's next pass, up to
// 1024 values on): K up to 2^30 keeps every such index far from wrapping.
constexpr int64_t kMaxK = int64_t(1) << 30;

Status fused_qkv(TensorView<const uint8_t, 2> hidden_state,
                 TensorView<const uint32_t, 1> input_row_offsets,
                 TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
                 TensorView<const uint8_t, 5> weight_scale, SectionScales sf, bool single_sf,
                 const PagedKVCacheCollection& kv, uint32_t layer_idx,
                 TensorView<bfloat16, 2> output, BlockFormat format, const HostRagged& host,
                 const Context& ctx) {
  // The shared checks (the CPU's messages), then the CUDA backend's own limits.
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_weight(weight, weight_scale, format, &k));
  QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_call(
      hidden_state, format, weight.shape[0], k, input_scale, sf, single_sf, kv, layer_idx, output));
  const int64_t m = hidden_state.shape[0], n = weight.shape[0], q_dim = output.shape[1];
  const int64_t kv_width = kv.num_heads * kv.head_size;
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("M", m));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("N", n));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("K", k));
  if (k > kMaxK) {
    return {StatusCode::kUnimplemented,
            "weight: the CUDA backend supports K <= 2^30, got K = " + str(k)};
  }
  if (m > int64_t(65535) * 128) {  // grid.y of the tiled kernel
    return {StatusCode::kUnimplemented,
            "hidden_state: the CUDA backend supports M <= 65535 * 128 "
            "rows per call, got " +
                str(m)};
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
  a.vector_loads = vector_friendly(hidden_state) && vector_friendly(weight) &&
                   pair_friendly(input_scale) && pair_friendly(weight_scale);
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
  QUANTKV_RETURN_IF_ERROR(ops::validate_quantize(x, global_scale, format, data, scales));
  const int64_t m = x.shape[0], k = x.shape[1];
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
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx, TensorView<bfloat16, 2> output,
    BlockFormat format, const HostRagged& host, const Context& ctx) {
  return fused_qkv(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
                   SectionScales{tensor_sf, tensor_sf, tensor_sf}, true, kv_collection, layer_idx,
                   output, format, host, ctx);
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, SectionScales section_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx, TensorView<bfloat16, 2> output,
    BlockFormat format, const HostRagged& host, const Context& ctx) {
  return fused_qkv(hidden_state, input_row_offsets, weight, input_scale, weight_scale, section_sf,
                   false, kv_collection, layer_idx, output, format, host, ctx);
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
