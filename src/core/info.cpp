#include "quantkv/info.hpp"

#include "quantkv/version.hpp"

namespace quantkv {

#if defined(QUANTKV_WITH_CUDA)
namespace cuda {
int device_count(std::string* why);  // src/cuda/device_info.cu
}
#endif

const char* version_string() { return QUANTKV_VERSION_STRING; }

BuildInfo build_info() {
  BuildInfo info;
#if defined(_OPENMP)
  info.openmp = true;
#endif
#if defined(QUANTKV_WITH_CUDA)
  info.cuda_compiled = true;
  info.cuda_architectures = QUANTKV_CUDA_ARCHITECTURES;
#endif
#if defined(__clang__)
  info.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  info.compiler = "gcc " __VERSION__;
#endif
  return info;
}

int cuda_device_count(std::string* why) {
#if defined(QUANTKV_WITH_CUDA)
  return cuda::device_count(why);
#else
  if (why) *why = "the CUDA backend is not built (nvcc was not found at configure time)";
  return -1;
#endif
}

}  // namespace quantkv
