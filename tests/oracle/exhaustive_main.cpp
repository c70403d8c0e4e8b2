// Exhaustive: every one of the 2^32 float bit patterns through every encoder, against CUDA.
// Opt-in (CTest label "exhaustive"); about a minute on 2 cores.
#include <cstdio>
#include <cstring>

#include "oracle/cuda_oracle.hpp"
#include "quantkv/formats.hpp"

int main() {
  long long mismatches = 0;
#pragma omp parallel for schedule(static) reduction(+ : mismatches)
  for (long long i = 0; i < (1LL << 32); ++i) {
    const uint32_t u = uint32_t(i);
    float x;
    std::memcpy(&x, &u, 4);
    using namespace quantkv;
    const bool ok = float_to_e4m3(x) == oracle::e4m3(x) && float_to_e2m1(x) == oracle::e2m1(x) &&
                    float_to_e8m0(x) == oracle::e8m0(x) && float_to_bf16(x) == oracle::bf16(x) &&
                    float_to_fp16(x) == oracle::fp16(x);
    if (!ok) {
      if (mismatches < 10) std::printf("mismatch at 0x%08x\n", u);
      ++mismatches;
    }
  }
  std::printf("exhaustive codec oracle: %lld mismatches over 2^32 floats\n", mismatches);
  return mismatches == 0 ? 0 : 1;
}
