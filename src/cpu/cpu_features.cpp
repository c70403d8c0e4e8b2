// Feature detection (x86-64: CPUID + XCR0; aarch64: getauxval(AT_HWCAP/AT_HWCAP2)), read once,
// and the active ISA level.
#include "quantkv/cpu_features.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define QUANTKV_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace quantkv {
namespace {

#if defined(QUANTKV_X86)
void cpuid(unsigned leaf, unsigned subleaf, unsigned r[4]) {
  __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
}

uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned r[4];
  cpuid(0, 0, r);
  const unsigned max_leaf = r[0];
  if (max_leaf < 1) return f;
  cpuid(1, 0, r);
  const bool osxsave = (r[2] >> 27) & 1;
  f.sse42 = (r[2] >> 20) & 1;
  const bool cpu_avx = (r[2] >> 28) & 1, cpu_fma = (r[2] >> 12) & 1, cpu_f16c = (r[2] >> 29) & 1;
  // XCR0: bits 1-2 = SSE/AVX state, bits 5-7 = opmask and ZMM state. Without them the OS does
  // not save the registers across context switches and the instructions must not be used.
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
  f.avx = cpu_avx && os_avx;
  f.fma = cpu_fma && os_avx;
  f.f16c = cpu_f16c && os_avx;
  if (max_leaf >= 7) {
    cpuid(7, 0, r);
    const unsigned ebx = r[1], ecx = r[2], edx = r[3];
    f.avx2 = f.avx && ((ebx >> 5) & 1);
    f.avx512f = os_avx512 && ((ebx >> 16) & 1);
    f.avx512dq = f.avx512f && ((ebx >> 17) & 1);
    f.avx512bw = f.avx512f && ((ebx >> 30) & 1);
    f.avx512vl = f.avx512f && ((ebx >> 31) & 1);
    f.avx512vnni = f.avx512f && ((ecx >> 11) & 1);
    f.avx512vbmi = f.avx512f && ((ecx >> 1) & 1);
    f.avx512fp16 = f.avx512f && ((edx >> 23) & 1);
    cpuid(7, 1, r);
    f.avx512bf16 = f.avx512f && ((r[0] >> 5) & 1);
    f.avx_vnni = f.avx && ((r[0] >> 4) & 1);
  }
  cpuid(0x80000000u, 0, r);
  if (r[0] >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      cpuid(0x80000002u + i, 0, r);
      std::memcpy(brand + 16 * i, r, 16);
    }
    f.brand = brand;
    const auto first = f.brand.find_first_not_of(' ');
    f.brand = first == std::string::npos ? "" : f.brand.substr(first);
  }
  return f;
}
#elif defined(__aarch64__) && defined(__linux__)
// Linux's arch/arm64 hwcap bits (uapi/asm/hwcap.h), spelled out for older C libraries.
constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcapAsimdDp = 1ul << 20, kHwcapSve = 1ul << 22;
constexpr unsigned long kHwcap2I8mm = 1ul << 13, kHwcap2Bf16 = 1ul << 14;

CpuFeatures detect() {
  CpuFeatures f;
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  f.neon = hwcap & kHwcapAsimd;
  f.dotprod = f.neon && (hwcap & kHwcapAsimdDp);
  f.sve = hwcap & kHwcapSve;
  f.i8mm = f.neon && (hwcap2 & kHwcap2I8mm);
  f.bf16 = f.neon && (hwcap2 & kHwcap2Bf16);
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

// Whether this build contains the level's kernels.
constexpr bool compiled_in(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return true;
    case IsaLevel::kAvx2:
    case IsaLevel::kAvx512:
#if defined(QUANTKV_X86_KERNELS)
      return true;
#else
      return false;
#endif
    case IsaLevel::kNeon:
    case IsaLevel::kNeonDotprod:
    case IsaLevel::kNeonBf16:
#if defined(QUANTKV_AARCH64_KERNELS)
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool cpu_has(IsaLevel level) {
  const CpuFeatures& f = cpu_features();
  switch (level) {
    case IsaLevel::kScalar:
      return true;
    case IsaLevel::kAvx2:
      return f.avx2 && f.fma && f.f16c;
    case IsaLevel::kAvx512:
      // Not BF16: the kernel table adds the vdpbf16ps kernels only where f.avx512bf16, so
      // Ice Lake / Cascade Lake servers (VNNI without BF16) run this level too.
      return cpu_has(IsaLevel::kAvx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
             f.avx512vnni;
    case IsaLevel::kNeon:
      return f.neon;
    case IsaLevel::kNeonDotprod:
      return f.neon && f.dotprod;
    case IsaLevel::kNeonBf16:
      return f.neon && f.dotprod && f.bf16;
  }
  return false;
}

bool supports(IsaLevel level) { return compiled_in(level) && cpu_has(level); }

IsaLevel initial_level() {
  IsaLevel level = max_supported_isa();
  if (const char* env = std::getenv("QUANTKV_ISA")) {
    IsaLevel wanted;
    // An unknown or unsupported value keeps the best level (info prints the outcome).
    if (parse_isa_level(env, &wanted).ok() && supports(wanted)) level = wanted;
  }
  return level;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{int(initial_level())};
  return level;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kNeon:
      return "neon";
    case IsaLevel::kNeonDotprod:
      return "neon-dotprod";
    case IsaLevel::kNeonBf16:
      return "neon-bf16";
  }
  return "unknown";
}

Status parse_isa_level(const std::string& name, IsaLevel* out) {
  std::string names;
  for (IsaLevel l : kAllIsaLevels) {
    if (name == isa_level_name(l)) {
      *out = l;
      return Status::Ok();
    }
    names += std::string(names.empty() ? "" : ", ") + isa_level_name(l);
  }
  return invalid_argument("isa: expected one of " + names + ", got '" + name + "'");
}

bool isa_level_supported(IsaLevel level) { return supports(level); }

IsaLevel max_supported_isa() {
  // Levels of one architecture are ordered, and a CPU has those of one architecture only.
  IsaLevel best = IsaLevel::kScalar;
  for (IsaLevel l : kAllIsaLevels) {
    if (supports(l)) best = l;
  }
  return best;
}

IsaLevel active_isa() { return IsaLevel(level_storage().load(std::memory_order_relaxed)); }

Status set_isa_level(IsaLevel level) {
  if (!supports(level)) {
    return {StatusCode::kUnimplemented, std::string("isa: this CPU does not support ") +
                                            isa_level_name(level) +
                                            " (best: " + isa_level_name(max_supported_isa()) + ")"};
  }
  level_storage().store(int(level), std::memory_order_relaxed);
  return Status::Ok();
}

}  // namespace quantkv
