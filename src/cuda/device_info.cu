// CUDA runtime queries for `quantkv info` and for the GPU tests' "no CUDA device" skip.
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/host_headers.cuh"

namespace quantkv::cuda {

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device";
  return count;
}

}  // namespace quantkv::cuda
