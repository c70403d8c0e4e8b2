#include "ceilings/ceilings.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ceilings/ceilings_kernels.hpp"
#include "quantkv/cpu_features.hpp"

namespace quantkv::ceilings {
namespace {

using Clock = std::chrono::steady_clock;

// Runs `body(iters)` on every thread for about `seconds`, best of 3; returns ops per second.
template <typename Body>
double best_rate(int threads, double seconds, Body body) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int64_t total = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const auto start = Clock::now();
      while (std::chrono::duration<double>(Clock::now() - start).count() < seconds / 3) {
        total += body(int64_t(1) << 16);
      }
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(total) / dt);
  }
  return best;
}

#if defined(QUANTKV_X86_KERNELS)
bool has_avx512() { return active_isa() == IsaLevel::kAvx512; }
bool has_avx2() { return active_isa() >= IsaLevel::kAvx2; }
#elif defined(QUANTKV_AARCH64_KERNELS)
// The aarch64 levels are ordered: neon < neon-dotprod < neon-bf16.
bool has_neon() { return active_isa() >= IsaLevel::kNeon; }
bool has_neon_dotprod() { return active_isa() >= IsaLevel::kNeonDotprod; }
bool has_neon_bf16() { return active_isa() == IsaLevel::kNeonBf16; }
#endif

// The loops' results land here so the compiler must compute them: one relaxed add per call of
// 2^16 iterations, from each thread's own local sink (no data race between the threads).
std::atomic<uint32_t> g_sink{0};
void keep(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  g_sink.fetch_add(bits, std::memory_order_relaxed);
}
void keep(int32_t v) { g_sink.fetch_add(uint32_t(v), std::memory_order_relaxed); }

// The rate of one of ceilings_kernels.hpp's loops (multiply-adds per second).
template <typename Sink>
double loop_rate(int threads, double seconds, int64_t (*loop)(int64_t iters, Sink* sink)) {
  return best_rate(threads, seconds, [&](int64_t n) {
    Sink sink = 0;
    const int64_t done = loop(n, &sink);
    keep(sink);
    return done;
  });
}

}  // namespace

double measure_bf16_dot_gflops(int threads, double seconds) {
  double macs = 0;
#if defined(QUANTKV_X86_KERNELS)  // the loops of the architecture built for
  if (has_avx512()) {
    for (int chains : {8, 12, 16}) {
      macs = std::max(macs, best_rate(threads, seconds / 3, [&](int64_t n) {
                        float sink = 0;
                        const int64_t done = bf16_dot_loop_avx512(chains, n, &sink);
                        keep(sink);
                        return done;
                      }));
    }
  } else if (has_avx2()) {  // no bf16 dot: the f32 FMA rate is the ceiling of the AVX2 path
    macs = loop_rate(threads, seconds, f32_fma_loop_avx2);
  } else
#elif defined(QUANTKV_AARCH64_KERNELS)
  if (has_neon_bf16()) {
    macs = loop_rate(threads, seconds, bf16_dot_loop_neon_bf16);
  } else if (has_neon()) {  // no bf16 multiply-add: the f32 FMLA rate is the NEON path's ceiling
    macs = loop_rate(threads, seconds, f32_fma_loop_neon);
  } else
#endif
  {
    macs = best_rate(threads, seconds, [&](int64_t n) {
      float acc[8] = {};
      for (int64_t i = 0; i < n; ++i)
        for (float& a : acc) a = a * 0.999f + 1.0f;
      keep(acc[0]);
      return n * 8;
    });
  }
  return 2 * macs / 1e9;
}

double measure_int8_dot_gops(int threads, double seconds) {
  double macs = 0;
#if defined(QUANTKV_X86_KERNELS)
  if (has_avx512()) {
    for (int chains : {8, 12, 16}) {
      macs = std::max(macs, best_rate(threads, seconds / 3, [&](int64_t n) {
                        int32_t sink = 0;
                        const int64_t done = int8_dot_loop_avx512(chains, n, &sink);
                        keep(sink);
                        return done;
                      }));
    }
  } else if (has_avx2()) {
    macs = loop_rate(threads, seconds, int8_dot_loop_avx2);
  } else
#elif defined(QUANTKV_AARCH64_KERNELS)
  if (has_neon_dotprod()) {
    macs = loop_rate(threads, seconds, int8_dot_loop_neon_dotprod);
  } else if (has_neon()) {
    macs = loop_rate(threads, seconds, int8_dot_loop_neon);
  } else
#endif
  {
    macs = best_rate(threads, seconds, [&](int64_t n) {
      uint32_t acc[8] = {};  // unsigned: wraps without undefined behaviour
      for (int64_t i = 0; i < n; ++i)
        for (uint32_t& a : acc) a = a * 3 + 1;
      keep(int32_t(acc[0]));
      return n * 8;
    });
  }
  return 2 * macs / 1e9;
}

double measure_read_gbs(int threads, double seconds) {
  // 1 GiB: several times any last-level cache we run on (this VM reports a 260 MiB L3, so a
  // 256 MiB buffer would partly be read from cache and overstate the bandwidth).
  const size_t n = (size_t(1) << 30) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = i;  // first touch by the reading threads
  double best = 0;
  uint64_t sink = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int reps = 0;
  while (reps < 2 || Clock::now() < deadline) {
    const auto t0 = Clock::now();
    uint64_t sum = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(^ : sum)
    for (size_t i = 0; i < n; ++i) sum ^= buf[i];
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    sink ^= sum;
    best = std::max(best, double(n * sizeof(uint64_t)) / dt / 1e9);
    if (++reps > 20) break;
  }
  if (sink == 0x1234) best += 0;  // keep the reads
  return best;
}

Ceilings measure_all(int threads, double seconds) {
  Ceilings c;
  c.bf16_gflops = measure_bf16_dot_gflops(threads, seconds);
  c.int8_gops = measure_int8_dot_gops(threads, seconds);
  c.read_gbs = measure_read_gbs(threads, seconds * 1.5);
  return c;
}

}  // namespace quantkv::ceilings
