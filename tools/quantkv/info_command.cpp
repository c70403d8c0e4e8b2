// `quantkv info`: version, CPU features, the ISA level chosen, threads, CUDA.
#include "info_command.hpp"

#include <cstdio>
#include <string>

#include "quantkv/context.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/info.hpp"

namespace quantkv::tool {

int run_info() {
  const CpuFeatures& f = cpu_features();
  const BuildInfo build = build_info();
  std::printf("quantkv %s\n", version_string());
  std::printf("  compiler      %s\n", build.compiler.c_str());
  std::printf("  cpu           %s\n", f.brand.empty() ? "(unknown)" : f.brand.c_str());
  std::string feats;
  const struct {
    const char* name;
    bool on;
  } list[] = {{"sse4.2", f.sse42},
              {"avx", f.avx},
              {"avx2", f.avx2},
              {"fma", f.fma},
              {"f16c", f.f16c},
              {"avx512f", f.avx512f},
              {"avx512bw", f.avx512bw},
              {"avx512vl", f.avx512vl},
              {"avx512dq", f.avx512dq},
              {"avx512vnni", f.avx512vnni},
              {"avx512vbmi", f.avx512vbmi},
              {"avx512bf16", f.avx512bf16},
              {"avx512fp16", f.avx512fp16},
              {"avxvnni", f.avx_vnni},
              {"neon", f.neon},
              {"dotprod", f.dotprod},
              {"bf16", f.bf16},
              {"i8mm", f.i8mm},
              {"sve", f.sve}};
  for (const auto& item : list) {
    if (item.on) feats += std::string(feats.empty() ? "" : " ") + item.name;
  }
  std::printf("  cpu features  %s\n", feats.empty() ? "(none detected)" : feats.c_str());
  std::printf("  isa level     %s (best supported: %s; override with QUANTKV_ISA)\n",
              isa_level_name(active_isa()), isa_level_name(max_supported_isa()));
  std::printf("  threads       %d (OpenMP %s; set OMP_NUM_THREADS or Context::num_threads)\n",
              resolved_num_threads(Context{}), build.openmp ? "on" : "off");
  if (build.cuda_compiled) {
    std::string why;
    const int devices = cuda_device_count(&why);
    std::printf("  cuda backend  built for sm_%s\n", build.cuda_architectures.c_str());
    if (devices > 0) {
      std::printf("  cuda devices  %d\n", devices);
    } else {
      std::printf("  cuda devices  none (%s)\n", why.c_str());
    }
  } else {
    std::printf("  cuda backend  not built (no nvcc at configure time)\n");
  }
  return 0;
}

}  // namespace quantkv::tool
