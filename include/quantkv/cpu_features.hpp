// CPU feature detection (x86-64: CPUID *and* XCR0, so a feature counts only when the OS saves
// its register state; aarch64: the kernel's HWCAP/HWCAP2 auxiliary vector, which likewise lists
// only what the OS enables) and the ISA level the CPU backend runs at.
#pragma once

#include <string>

#include "quantkv/status.hpp"

namespace quantkv {

struct CpuFeatures {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false, avx_vnni = false;
  bool avx512vbmi = false;  // vpermb / vpermi2b (byte tables): a faster e4m3 decode
  // aarch64: Advanced SIMD, ARMv8.2 dotprod (SDOT/UDOT), ARMv8.6 BF16 (BFDOT/BFMLAL) and
  // I8MM (SMMLA/USMMLA), SVE.
  bool neon = false, dotprod = false, bf16 = false, i8mm = false, sve = false;
  std::string brand;  // "Intel(R) Xeon(R) ..." from CPUID leaves 0x80000002..4
};

// Read once; the OS-enabled features of this CPU.
const CpuFeatures& cpu_features();

// The code paths of the CPU backend, from slowest to fastest within each architecture.
//  kScalar:      plain C++, runs everywhere, the test oracle.
//  kAvx2:        x86-64: AVX2 + FMA + F16C.
//  kAvx512:      x86-64: AVX-512 F/BW/VL/DQ + VNNI + BF16.
//  kNeon:        aarch64: Advanced SIMD (every ARMv8-A CPU).
//  kNeonDotprod: aarch64: + ARMv8.2 dotprod (Graviton2 / Neoverse N1 and later).
//  kNeonBf16:    aarch64: + dotprod + BF16 (Graviton3/4, NVIDIA Grace: Neoverse V1/V2).
enum class IsaLevel : int {
  kScalar = 0,
  kAvx2 = 1,
  kAvx512 = 2,
  kNeon = 3,
  kNeonDotprod = 4,
  kNeonBf16 = 5
};
// Every level, in the order above.
inline constexpr IsaLevel kAllIsaLevels[] = {IsaLevel::kScalar,      IsaLevel::kAvx2,
                                             IsaLevel::kAvx512,      IsaLevel::kNeon,
                                             IsaLevel::kNeonDotprod, IsaLevel::kNeonBf16};

// "scalar" | "avx2" | "avx512" | "neon" | "neon-dotprod" | "neon-bf16"
const char* isa_level_name(IsaLevel level);
Status parse_isa_level(const std::string& name, IsaLevel* out);
// Whether this CPU (and this build) can run the level.
bool isa_level_supported(IsaLevel level);

// The best level this CPU supports and this build has kernels for (scalar when built with
// QUANTKV_X86_KERNELS=OFF).
IsaLevel max_supported_isa();
// The level in use: max_supported_isa(), or QUANTKV_ISA from the environment when set
// (read once), or the last successful set_isa_level().
IsaLevel active_isa();
// Forces a level, e.g. so tests run every path; fails if the CPU lacks it. The CPU backend
// reads the level on every call (src/cpu/kernels.hpp), so it takes effect at once.
Status set_isa_level(IsaLevel level);

}  // namespace quantkv
