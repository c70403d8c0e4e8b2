// Build and runtime information: what `quantkv info` prints.
#pragma once

#include <string>

namespace quantkv {

// "0.1.0"
const char* version_string();

struct BuildInfo {
  bool openmp = false;             // CPU threading through OpenMP
  bool cuda_compiled = false;      // the CUDA backend was built (nvcc was found)
  std::string cuda_architectures;  // e.g. "90a"
  std::string compiler;
};
BuildInfo build_info();

// Number of CUDA devices the runtime sees: -1 when the CUDA backend is not built; 0 with a
// reason in *why (e.g. "no CUDA-capable device is detected") when none is usable.
int cuda_device_count(std::string* why);

}  // namespace quantkv
