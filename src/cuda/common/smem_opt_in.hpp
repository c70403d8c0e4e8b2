// A kernel's dynamic shared-memory limit, raised once per device to the most any launch of it
// can need (thread-safe), instead of being set per launch to that launch's need.
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) holds one value per function and device:
// set per launch, a host thread launching with less could lower it between another thread's
// set and launch, and that launch would fail. The attribute is only an upper bound (a launch
// still gets exactly the bytes it asks for, and occupancy follows those), so raising it once
// to the maximum and never lowering it costs nothing and removes the race.
// Plain C++ (no CUDA types): the kernels' files hold one static instance per kernel.
#pragma once

#include <mutex>
#include <vector>

#include "quantkv/status.hpp"

namespace quantkv::cuda::detail {

class SharedMemoryOptIn {
 public:
  // `kernel`: the __global__ function (its host stub's address); `max_bytes`: the most
  // dynamic shared memory any launch of it asks for; `name` names it in errors.
  SharedMemoryOptIn(const void* kernel, int max_bytes, const char* name)
      : kernel_(kernel), max_bytes_(max_bytes), name_(name) {}

  // Ok when a launch of `bytes` may follow on the current device: the first call per device
  // raises the limit to min(max_bytes, what the device allows beside the kernel's static
  // shared memory); later calls only compare. A need above the device's limit is
  // kUnimplemented, naming the kernel; a failed CUDA call is retried on the next call.
  Status ensure(int bytes);

 private:
  const void* kernel_;
  int max_bytes_;
  const char* name_;
  std::mutex mutex_;
  std::vector<int> limit_;  // per device ordinal: the limit set, or 0 before the first call
};

}  // namespace quantkv::cuda::detail
