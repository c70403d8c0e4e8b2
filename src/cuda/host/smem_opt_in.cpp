// The once-per-device shared-memory opt-in of the kernels (src/cuda/common/smem_opt_in.hpp).
#if defined(QUANTKV_WITH_CUDA)
#include "cuda/common/smem_opt_in.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/common/cuda_status.hpp"

namespace quantkv::cuda::detail {

Status SharedMemoryOptIn::ensure(int bytes) {
  int device = 0;
  QUANTKV_RETURN_IF_ERROR(from_cuda(cudaGetDevice(&device), "cudaGetDevice"));
  int limit = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (std::size_t(device) >= limit_.size()) limit_.resize(std::size_t(device) + 1, 0);
    if (limit_[device] == 0) {
      int opt_in = 0;
      QUANTKV_RETURN_IF_ERROR(from_cuda(
          cudaDeviceGetAttribute(&opt_in, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)"));
      cudaFuncAttributes attr{};
      QUANTKV_RETURN_IF_ERROR(from_cuda(cudaFuncGetAttributes(&attr, kernel_), name_));
      const int allowed = std::min(max_bytes_, opt_in - int(attr.sharedSizeBytes));
      QUANTKV_RETURN_IF_ERROR(from_cuda(
          cudaFuncSetAttribute(kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize, allowed),
          name_));
      limit_[device] = std::max(allowed, 1);
    }
    limit = limit_[device];
  }
  if (bytes > limit) {
    return {StatusCode::kUnimplemented, std::string(name_) + ": needs " + std::to_string(bytes) +
                                            " bytes of dynamic shared memory, device " +
                                            std::to_string(device) + " allows " +
                                            std::to_string(limit)};
  }
  return Status::Ok();
}

}  // namespace quantkv::cuda::detail
#endif  // QUANTKV_WITH_CUDA
