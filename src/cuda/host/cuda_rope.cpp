// fused_qk_rope_ragged on the GPU: validation on the host (with the host copies of the ragged
// batch and of position_ids), then src/cuda/rope_sm90.cu.
#if defined(QUANTKV_WITH_CUDA)
#include <vector>

#include "core/view_checks.hpp"
#include "cuda/host/cuda_validate.hpp"
#include "ops/rope_options.hpp"
#include "quantkv/cuda.hpp"

namespace quantkv::cuda {

Status fused_qk_rope_ragged(TensorView<const bfloat16, 3> q_proj,
                            TensorView<const uint32_t, 1> input_row_offsets,
                            const PagedKVCacheCollection& kv_collection, const RopeOptions& options,
                            uint32_t layer_idx, TensorView<bfloat16, 3> output,
                            const HostRagged& host, const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(
      check_shape("q_proj", "[T, Hq, D]", q_proj, {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t T = q_proj.shape[0], Hq = q_proj.shape[1], D = q_proj.shape[2];
  QUANTKV_RETURN_IF_ERROR(check_shape("output", "[T, Hq, D]", output, {T, Hq, D}));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("q_proj.shape[0] (T)", T));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("q_proj: Hq * D", Hq * D));
  QUANTKV_RETURN_IF_ERROR(detail::validate_ragged(input_row_offsets, kv_collection, host, T,
                                                  /*require_pages=*/true, "kv_collection"));
  if (D != kv_collection.head_size) {
    return invalid_argument("q_proj: expected D = q_proj.shape[2] == kv_collection.head_size = " +
                            detail::str(kv_collection.head_size) + ", got " + detail::str(D));
  }
  if (int64_t(layer_idx) >= kv_collection.num_layers) {
    return out_of_range("layer_idx: expected < kv_collection.num_layers = " +
                        detail::str(kv_collection.num_layers) + ", got " + detail::str(layer_idx));
  }
  // The options, with the device position ids and cache lengths read through host copies.
  RopeOptions host_options = options;
  std::vector<uint32_t> ids;
  if (options.position_ids.shape[0] > 0) {
    QUANTKV_RETURN_IF_ERROR(check_shape("options.position_ids", "[T]", options.position_ids, {T}));
    ids.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) {  // strided device array: one element at a time
      QUANTKV_RETURN_IF_ERROR(
          copy_to_host(&ids[size_t(t)], &options.position_ids(t), sizeof(uint32_t)));
    }
    host_options.position_ids = make_view<const uint32_t>(ids.data(), T);
  }
  QUANTKV_RETURN_IF_ERROR(
      ::quantkv::detail::validate_rope_options(host_options, T, D, false, "options"));
  PagedKVCacheCollection mirror = kv_collection;
  mirror.cache_lengths = host.cache_lengths;
  mirror.lookup_table = host.lookup_table;
  QUANTKV_RETURN_IF_ERROR(::quantkv::detail::validate_rope_cache_positions(
      host_options, mirror, host.input_row_offsets, "options"));
  if (T > 0 && input_row_offsets.strides[0] != 1) {
    return invalid_argument("input_row_offsets: expected a contiguous device array (stride 1)");
  }
  launch::RopeArgs a;
  a.q = reinterpret_cast<const uint16_t*>(q_proj.data);
  a.q_stride0 = q_proj.strides[0];
  a.q_stride1 = q_proj.strides[1];
  a.q_stride2 = q_proj.strides[2];
  a.out = reinterpret_cast<uint16_t*>(output.data);
  a.out_stride0 = output.strides[0];
  a.out_stride1 = output.strides[1];
  a.out_stride2 = output.strides[2];
  a.T = int32_t(T);
  a.Hq = int32_t(Hq);
  a.D = int32_t(D);
  a.freqs = options.freqs_cis.data;
  a.freqs_stride0 = options.freqs_cis.strides[0];
  a.rope_dim = int32_t(::quantkv::detail::rope_dim_of(options));
  a.rope_offset = int32_t(::quantkv::detail::rope_offset(options, D));
  a.interleaved = options.layout == RopeLayout::kInterleaved;
  a.position_ids = options.position_ids.shape[0] > 0 ? options.position_ids.data : nullptr;
  a.position_stride = options.position_ids.strides[0];
  a.cache = detail::paged_rows(kv_collection, layer_idx);
  a.scale_granularity = kv_collection.scale_granularity;
  a.offs = input_row_offsets.data;
  a.batch = int32_t(kv_collection.batch_size());
  return launch::fused_qk_rope_ragged(a, ctx.cuda_stream);
}

}  // namespace quantkv::cuda
#endif  // QUANTKV_WITH_CUDA
