// CUDA runtime errors -> quantkv::Status, and the launch-error check every launcher ends with.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "quantkv/status.hpp"

namespace quantkv::cuda::detail {

inline Status from_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return {StatusCode::kInternal,
          std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")"};
}
// After a <<<>>> launch: configuration errors (too much shared memory, bad grid) surface here.
inline Status launch_status(const char* kernel) { return from_cuda(cudaGetLastError(), kernel); }

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace quantkv::cuda::detail
