// The CUDA backend (Hopper, sm_90a): device entry points of the indexer, the fused
// NVFP4 / MXFP4 / MXFP8 QKV projection, the block-scaled quantiser and the indexer K store,
// plus the small device-memory and timing helpers the GPU tests and benchmarks use.
//
// No CUDA type appears here: the stream is `Context::cuda_stream` (a cudaStream_t passed as
// void*; nullptr = the legacy default stream). Every TensorView and every pointer inside a
// PagedKVCacheCollection passed to these functions is DEVICE memory, except the `HostRagged`
// mirror, which is host memory.
//
// Validation (contract §6, docs/cuda.md): offsets, cache lengths and the page table live on the
// device, where the host cannot read them without a synchronising copy. The caller therefore
// passes host copies of them (`HostRagged`) — serving engines keep these on the host anyway to
// plan the batch. Everything is validated on the host copies, with the CPU backend's messages,
// before any kernel is launched; on error nothing is written. The device arrays must hold the
// same values as the host copies (the caller's contract); as a second line of defence the
// kernels never read or write a page id >= num_blocks.
//
// When the library is built without CUDA every function here links and returns
// StatusCode::kUnimplemented ("CUDA backend not built").
#pragma once

#include <cstddef>
#include <cstdint>

#include "quantkv/context.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/rope.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv::cuda {

// Host copies of the device-resident ragged-batch metadata, used for validation and for
// planning the launch (chunking, grid sizes). Must equal the device arrays.
struct HostRagged {
  TensorView<const uint32_t, 1> input_row_offsets;  // [B + 1]            host memory
  TensorView<const uint32_t, 1> cache_lengths;      // [B]                host memory
  TensorView<const uint32_t, 2> lookup_table;       // [B, max_pages]     host memory
};

// ----------------------------------------------------------------- operations (device data)

// contract §3 on the GPU; same contract and ordering as quantkv::mla_indexer_ragged_float8_paged.
// Scores are staged in a device workspace of at most ctx.scores_budget_bytes (chunked over
// tokens), allocated stream-ordered on ctx.cuda_stream. top_k is limited to kMaxTopK here.
inline constexpr int64_t kMaxTopK = 16384;
Status mla_indexer_ragged_float8_paged(
    TensorView<int32_t, 2> output_indices,            // [T, top_k]   device
    TensorView<const float8_e4m3fn, 3> q,             // [T, H, D]    device
    TensorView<const float, 2> q_s,                   // [T, H]       device
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]      device
    const PagedKVCacheCollection& k_collection,       // device blocks/scales/lengths/table
    uint32_t layer_idx, MaskType mask, const HostRagged& host, const Context& ctx);

// contract §4 on the GPU (bf16 tensor cores on exactly dequantised operands).
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state,        // [M, row_bytes(K)]   device
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]             device
    TensorView<const uint8_t, 2> weight,              // [N, row_bytes(K)]   device
    TensorView<const uint8_t, 5> input_scale,         // 5-D swizzled        device
    TensorView<const uint8_t, 5> weight_scale,        // 5-D swizzled        device
    float tensor_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output,  // [M, q_dim]          device
    BlockFormat format, const HostRagged& host, const Context& ctx);
Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state,        // [M, row_bytes(K)]   device
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]             device
    TensorView<const uint8_t, 2> weight,              // [N, row_bytes(K)]   device
    TensorView<const uint8_t, 5> input_scale,         // 5-D swizzled        device
    TensorView<const uint8_t, 5> weight_scale,        // 5-D swizzled        device
    SectionScales section_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output,  // [M, q_dim]          device
    BlockFormat format, const HostRagged& host, const Context& ctx);

// contract §5 on the GPU, bit-exact with the CPU version (no host values needed).
Status quantize_dynamic_block_scaled(TensorView<const float, 2> x,  // [M, K]     device
                                     float global_scale, BlockFormat format,
                                     TensorView<uint8_t, 2> data,    // [M, row_bytes(K)]
                                     TensorView<uint8_t, 5> scales,  // 5-D swizzled
                                     const Context& ctx);
Status quantize_dynamic_block_scaled(TensorView<const bfloat16, 2> x,  // [M, K]     device
                                     float global_scale, BlockFormat format,
                                     TensorView<uint8_t, 2> data,    // [M, row_bytes(K)]
                                     TensorView<uint8_t, 5> scales,  // 5-D swizzled
                                     const Context& ctx);

// contract §5 indexer K store on the GPU.
Status indexer_k_store(TensorView<const float, 2> k,                     // [T, D]   device
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]  device
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const HostRagged& host, const Context& ctx);
Status indexer_k_store(TensorView<const bfloat16, 2> k,                  // [T, D]   device
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]  device
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const HostRagged& host, const Context& ctx);

// fused_qk_rope_ragged on the GPU (include/quantkv/rope.hpp): bf16 q, a cache of any dtype,
// every option of the CPU version; the same bits (products rounded separately, no FMA).
// options.freqs_cis and options.position_ids are device memory.
Status fused_qk_rope_ragged(TensorView<const bfloat16, 3> q_proj,             // [T, Hq, D] device
                            TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]    device
                            const PagedKVCacheCollection& kv_collection, const RopeOptions& options,
                            uint32_t layer_idx,
                            TensorView<bfloat16, 3> output,  // [T, Hq, D] device
                            const HostRagged& host, const Context& ctx);
// The indexer with options (IndexerOptions::output: positions or global slots; `timings` is
// not filled on the GPU), over MAX's collection or over the engines' layout
// (EngineIndexerKCache: its data, cache_lengths and lookup_table in device memory; `host`
// holds host copies of the offsets, cache lengths and table, as above). Same indices as the
// CPU backend. The kernels load key rows 16 bytes at a time: the engine buffer and its page
// stride must be 16-byte aligned (page_size a multiple of 4 when packed), else kUnimplemented.
Status mla_indexer_ragged_float8_paged(
    TensorView<int32_t, 2> output_indices,            // [T, top_k]   device
    TensorView<const float8_e4m3fn, 3> q,             // [T, H, D]    device
    TensorView<const float, 2> q_s,                   // [T, H]       device
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]      device
    const PagedKVCacheCollection& k_collection, uint32_t layer_idx, MaskType mask,
    const HostRagged& host, const Context& ctx, const IndexerOptions& options);
Status mla_indexer_ragged_float8_paged(
    TensorView<int32_t, 2> output_indices,            // [T, top_k]   device
    TensorView<const float8_e4m3fn, 3> q,             // [T, H, D]    device
    TensorView<const float, 2> q_s,                   // [T, H]       device
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]      device
    const EngineIndexerKCache& k_cache, MaskType mask, const HostRagged& host, const Context& ctx,
    const IndexerOptions& options = {});

// The K store into the engines' layout on the GPU (bit-identical to the CPU's).
Status indexer_k_store(TensorView<const float, 2> k,                     // [T, D]   device
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]  device
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const HostRagged& host, const Context& ctx);
Status indexer_k_store(TensorView<const bfloat16, 2> k,                  // [T, D]   device
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]  device
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const HostRagged& host, const Context& ctx);

// ----------------------------------------------------------------- device memory, timing
// Thin wrappers over the CUDA runtime so that plain C++ (tests, benchmarks, bindings) can use
// the backend without CUDA headers. Errors come back as Status with cudaGetErrorString text.
Status device_malloc(void** ptr, std::size_t bytes);
Status device_free(void* ptr);
Status copy_to_device(void* dst, const void* src, std::size_t bytes);  // synchronous
Status copy_to_host(void* dst, const void* src, std::size_t bytes);    // synchronous
Status device_memset(void* dst, int byte, std::size_t bytes);          // synchronous
// Device-to-device copy enqueued on ctx.cuda_stream (the benchmarks' bandwidth ceiling).
Status copy_device_to_device(void* dst, const void* src, std::size_t bytes, const Context& ctx);
Status synchronize(const Context& ctx);  // waits for ctx.cuda_stream; reports kernel errors
// A stream of its own for ctx.cuda_stream (cudaStreamNonBlocking: it does not wait for the
// legacy default stream, so work on it is ordered only by the stream itself), and its release.
Status stream_create(void** stream);
Status stream_destroy(void* stream);

// An owning device allocation (move-only). `ok()` is false when the allocation failed; the
// Status of that failure is in status().
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  Status upload(const void* src, std::size_t bytes) { return copy_to_device(ptr_, src, bytes); }
  Status download(void* dst, std::size_t bytes) const { return copy_to_host(dst, ptr_, bytes); }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  Status status_;
};

// Device-event timing on ctx.cuda_stream: records an event, runs `fn(arg)` `iterations`
// times, records another, synchronises and stores the mean milliseconds per iteration.
// `fn` returns a Status; the first error stops the loop and is returned.
using TimedFn = Status (*)(void* arg);
Status time_on_stream(TimedFn fn, void* arg, int iterations, const Context& ctx,
                      double* ms_per_iteration);

// Properties of the current device (0 values when the backend is not built).
struct DeviceProperties {
  int sm_count = 0;
  int major = 0, minor = 0;
  std::size_t l2_bytes = 0;
  std::size_t global_memory_bytes = 0;
  char name[256] = {};
};
Status device_properties(DeviceProperties* out);

}  // namespace quantkv::cuda
