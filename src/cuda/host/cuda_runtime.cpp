// Device memory, copies, synchronisation, timing and device properties for plain C++ callers
// (include/quantkv/cuda.hpp): the tests and benchmarks use the backend without CUDA headers.
// Host code only, compiled by the host compiler with the project's warnings; built only with
// the CUDA backend (src/cuda/host/cuda_unavailable.cpp has the stubs otherwise).
#if defined(QUANTKV_WITH_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "cuda/common/cuda_status.hpp"
#include "quantkv/cuda.hpp"

namespace quantkv::cuda {

using detail::from_cuda;

Status device_malloc(void** ptr, std::size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return Status::Ok();
  return from_cuda(cudaMalloc(ptr, bytes), "cudaMalloc");
}
Status device_free(void* ptr) { return from_cuda(cudaFree(ptr), "cudaFree"); }
Status copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return from_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
Status copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return from_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}
Status device_memset(void* dst, int byte, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  return from_cuda(cudaMemset(dst, byte, bytes), "cudaMemset");
}
Status copy_device_to_device(void* dst, const void* src, std::size_t bytes, const Context& ctx) {
  if (bytes == 0) return Status::Ok();
  return from_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                   detail::as_stream(ctx.cuda_stream)),
                   "cudaMemcpyAsync D2D");
}
Status synchronize(const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(from_cuda(cudaGetLastError(), "before synchronize"));
  return from_cuda(cudaStreamSynchronize(detail::as_stream(ctx.cuda_stream)),
                   "cudaStreamSynchronize");
}

Status stream_create(void** stream) {
  *stream = nullptr;
  cudaStream_t s = nullptr;
  QUANTKV_RETURN_IF_ERROR(
      from_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  *stream = s;
  return Status::Ok();
}
Status stream_destroy(void* stream) {
  return from_cuda(cudaStreamDestroy(detail::as_stream(stream)), "cudaStreamDestroy");
}

DeviceBuffer::DeviceBuffer(std::size_t bytes)
    : bytes_(bytes), status_(device_malloc(&ptr_, bytes)) {
  if (!status_.ok()) bytes_ = 0;
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      status_(std::move(other.status_)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    status_ = std::move(other.status_);
  }
  return *this;
}

Status time_on_stream(TimedFn fn, void* arg, int iterations, const Context& ctx,
                      double* ms_per_iteration) {
  const cudaStream_t stream = detail::as_stream(ctx.cuda_stream);
  cudaEvent_t start = nullptr, stop = nullptr;
  QUANTKV_RETURN_IF_ERROR(from_cuda(cudaEventCreate(&start), "cudaEventCreate"));
  Status st = from_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  if (st.ok()) st = from_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; st.ok() && i < iterations; ++i) st = fn(arg);
  if (st.ok()) st = from_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
  if (st.ok()) st = from_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  if (st.ok()) st = from_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  if (st.ok()) *ms_per_iteration = double(ms) / (iterations > 0 ? iterations : 1);
  (void)cudaEventDestroy(start);
  if (stop) (void)cudaEventDestroy(stop);
  return st;
}

Status device_properties(DeviceProperties* out) {
  int device = 0;
  QUANTKV_RETURN_IF_ERROR(from_cuda(cudaGetDevice(&device), "cudaGetDevice"));
  cudaDeviceProp p{};
  QUANTKV_RETURN_IF_ERROR(
      from_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties"));
  *out = DeviceProperties{};
  out->sm_count = p.multiProcessorCount;
  out->major = p.major;
  out->minor = p.minor;
  out->l2_bytes = std::size_t(p.l2CacheSize);
  out->global_memory_bytes = p.totalGlobalMem;
  std::memcpy(out->name, p.name, std::min(sizeof(out->name), sizeof(p.name)) - 1);
  return Status::Ok();
}

}  // namespace quantkv::cuda

#endif  // QUANTKV_WITH_CUDA
