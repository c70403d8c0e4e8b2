// The machine's own ceilings, measured in the same run as the kernels they judge, with the
// instructions of the active ISA level: peak bf16 dot-product rate (vdpbf16ps; f32 FMA on
// AVX2 and on AVX-512 without AVX512_BF16, where those kernels are the AVX2 ones), peak int8
// dot-product rate (vpdpbusd; pmaddubsw + paddw on AVX2), and the memory read bandwidth.
// Shared by bench/ (Google Benchmark) and `quantkv bench`.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>

namespace quantkv::ceilings {

struct Ceilings {
  double bf16_gflops = 0;  // 2 flops per bf16 multiply-add
  double int8_gops = 0;    // 2 ops per int8 multiply-add
  double read_gbs = 0;     // streaming read of a buffer far larger than the caches
};

// Each measurement runs for about `seconds` on `threads` threads and keeps the best of many
// short windows (the machines are shared and noisy; see ceilings.cpp).
double measure_bf16_dot_gflops(int threads, double seconds = 0.2);
double measure_int8_dot_gops(int threads, double seconds = 0.2);
double measure_read_gbs(int threads, double seconds = 0.3);
// Peak f32 FMA rate (2 flops per multiply-add) with the active level's widest vectors (f32
// multiply + add on the 128-bit baseline): the ceiling of fp32 kernels such as sparse MLA's.
double measure_f32_fma_gflops(int threads, double seconds = 0.2);
Ceilings measure_all(int threads, double seconds = 0.2);

// A decode-sized kernel streams its weight from memory, so on a shared machine each call's time
// includes what the neighbours take of the memory bus at that moment, while measure_read_gbs
// keeps its best window: a mean call against it mixes two statistics. BestRate keeps a
// benchmark's fastest call as a rate (its bytes / its time), to be divided by
// best_read_gbs(threads): best against best.
struct BestRate {
  double gbs = 0;
  std::chrono::steady_clock::time_point t0{};
  void start() { t0 = std::chrono::steady_clock::now(); }
  void stop(double bytes) {
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > 0) gbs = std::max(gbs, bytes / dt / 1e9);
  }
};

// The read ceiling at `threads` measured again now (after a benchmark's calls, in the same
// conditions) and kept as the best of every measurement so far in this process, `first` (a
// measurement made earlier) included: a rate the machine did reach, so never below a call's.
inline double best_read_gbs(int threads, double first) {
  static std::map<int, double> best;
  double& b = best[threads];
  b = std::max({b, first, measure_read_gbs(threads, 0.1)});
  return b;
}

}  // namespace quantkv::ceilings
