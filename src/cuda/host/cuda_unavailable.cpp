// The CUDA entry points of include/quantkv/cuda.hpp when the library is built without the CUDA
// backend: they link, and say so (StatusCode::kUnimplemented), so code written against the
// backend builds everywhere and the GPU tests skip instead of failing to link.
#if !defined(QUANTKV_WITH_CUDA)
#include "quantkv/cuda.hpp"

namespace quantkv::cuda {
namespace {
Status not_built() { return {StatusCode::kUnimplemented, "CUDA backend not built"}; }
}  // namespace

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2>, TensorView<const float8_e4m3fn, 3>,
                                       TensorView<const float, 2>, TensorView<const uint32_t, 1>,
                                       const PagedKVCacheCollection&, uint32_t, MaskType,
                                       const HostRagged&, const Context&) {
  return not_built();
}
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2>, TensorView<const uint32_t, 1>, TensorView<const uint8_t, 2>,
    TensorView<const uint8_t, 5>, TensorView<const uint8_t, 5>, float,
    const PagedKVCacheCollection&, uint32_t, TensorView<bfloat16, 2>, BlockFormat,
    const HostRagged&, const Context&) {
  return not_built();
}
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2>, TensorView<const uint32_t, 1>, TensorView<const uint8_t, 2>,
    TensorView<const uint8_t, 5>, TensorView<const uint8_t, 5>, SectionScales,
    const PagedKVCacheCollection&, uint32_t, TensorView<bfloat16, 2>, BlockFormat,
    const HostRagged&, const Context&) {
  return not_built();
}
Status quantize_dynamic_block_scaled(TensorView<const float, 2>, float, BlockFormat,
                                     TensorView<uint8_t, 2>, TensorView<uint8_t, 5>,
                                     const Context&) {
  return not_built();
}
Status quantize_dynamic_block_scaled(TensorView<const bfloat16, 2>, float, BlockFormat,
                                     TensorView<uint8_t, 2>, TensorView<uint8_t, 5>,
                                     const Context&) {
  return not_built();
}
Status indexer_k_store(TensorView<const float, 2>, TensorView<const uint32_t, 1>,
                       const PagedKVCacheCollection&, uint32_t, ScaleMode, const HostRagged&,
                       const Context&) {
  return not_built();
}
Status indexer_k_store(TensorView<const bfloat16, 2>, TensorView<const uint32_t, 1>,
                       const PagedKVCacheCollection&, uint32_t, ScaleMode, const HostRagged&,
                       const Context&) {
  return not_built();
}
Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2>, TensorView<const float8_e4m3fn, 3>,
                                       TensorView<const float, 2>, TensorView<const uint32_t, 1>,
                                       const PagedKVCacheCollection&, uint32_t, MaskType,
                                       const HostRagged&, const Context&, const IndexerOptions&) {
  return not_built();
}
Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2>, TensorView<const float8_e4m3fn, 3>,
                                       TensorView<const float, 2>, TensorView<const uint32_t, 1>,
                                       const EngineIndexerKCache&, MaskType, const HostRagged&,
                                       const Context&, const IndexerOptions&) {
  return not_built();
}
Status indexer_k_store(TensorView<const float, 2>, TensorView<const uint32_t, 1>,
                       const EngineIndexerKCache&, ScaleMode, const HostRagged&, const Context&) {
  return not_built();
}
Status indexer_k_store(TensorView<const bfloat16, 2>, TensorView<const uint32_t, 1>,
                       const EngineIndexerKCache&, ScaleMode, const HostRagged&, const Context&) {
  return not_built();
}

Status fused_qk_rope_ragged(TensorView<const bfloat16, 3>, TensorView<const uint32_t, 1>,
                            const PagedKVCacheCollection&, const RopeOptions&, uint32_t,
                            TensorView<bfloat16, 3>, const HostRagged&, const Context&) {
  return not_built();
}

Status device_malloc(void** ptr, std::size_t) {
  *ptr = nullptr;
  return not_built();
}
Status device_free(void*) { return not_built(); }
Status copy_to_device(void*, const void*, std::size_t) { return not_built(); }
Status copy_to_host(void*, const void*, std::size_t) { return not_built(); }
Status device_memset(void*, int, std::size_t) { return not_built(); }
Status copy_device_to_device(void*, const void*, std::size_t, const Context&) {
  return not_built();
}
Status synchronize(const Context&) { return not_built(); }
Status stream_create(void** stream) {
  *stream = nullptr;
  return not_built();
}
Status stream_destroy(void*) { return not_built(); }

DeviceBuffer::DeviceBuffer(std::size_t) : status_(not_built()) {}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : status_(std::move(other.status_)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  status_ = std::move(other.status_);
  return *this;
}

Status time_on_stream(TimedFn, void*, int, const Context&, double*) { return not_built(); }
Status device_properties(DeviceProperties* out) {
  *out = DeviceProperties{};
  return not_built();
}

}  // namespace quantkv::cuda
#endif  // !QUANTKV_WITH_CUDA
