#include "ceilings/ceilings.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ceilings/ceilings_kernels.hpp"
#include "quantkv/cpu_features.hpp"

namespace quantkv::ceilings {
namespace {

using Clock = std::chrono::steady_clock;

// Runs `body(iters)` on every thread for about `seconds`, timing each call of 2^14 iterations
// (tens of microseconds); returns the sum over the threads of each one's best rate (ops per
// second). Short windows: on a shared machine a long window is cut by time slices of other
// processes, which a short kernel call often escapes, so a long-window ceiling reads low
// against it (the ratio-above-1 the bench reports as an error).
template <typename Body>
double best_rate(int threads, double seconds, Body body) {
  double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    double best = 0;
    const auto start = Clock::now();
    do {
      const auto t0 = Clock::now();
      const int64_t ops = body(int64_t(1) << 14);
      best = std::max(best, double(ops) / std::chrono::duration<double>(Clock::now() - t0).count());
    } while (std::chrono::duration<double>(Clock::now() - start).count() < seconds);
    total = best;
  }
  return total;
}

// The loops' results land here so the compiler must compute them: one relaxed add per call of
// 2^14 iterations, from each thread's own local sink (no data race between the threads).
std::atomic<uint32_t> g_sink{0};
void keep(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  g_sink.fetch_add(bits, std::memory_order_relaxed);
}
void keep(int32_t v) { g_sink.fetch_add(uint32_t(v), std::memory_order_relaxed); }
void keep(uint64_t v) { g_sink.fetch_add(uint32_t(v ^ (v >> 32)), std::memory_order_relaxed); }

using F32Loop = int64_t (*)(int accumulators, int64_t iters, float* sink);
using IntLoop = int64_t (*)(int accumulators, int64_t iters, int32_t* sink);
using ReadLoop = uint64_t (*)(const uint64_t* data, int64_t words);

// The multiply-add rate of `loop`, fastest over its chain counts (the count that covers
// latency x ports differs between cores), `seconds` in all.
template <typename Sink, typename Loop>
double best_macs(int threads, double seconds, const std::vector<int>& chains, Loop loop) {
  double macs = 0;
  for (const int n : chains) {
    macs = std::max(macs, best_rate(threads, seconds / double(chains.size()), [&](int64_t iters) {
                      Sink sink = 0;
                      const int64_t done = loop(n, iters, &sink);
                      keep(sink);
                      return done;
                    }));
  }
  return macs;
}

// The loops of the active ISA level: what the kernels that run at this level can use.
struct LevelLoops {
  // bf16 dot on AVX-512 with BF16; f32 FMA on AVX2 and on AVX-512 without BF16 (whose indexer
  // and MXFP8 kernels are the AVX2 ones).
  F32Loop f32 = f32_mul_add_loop_generic;
  std::vector<int> f32_chains = {8, 12};
  IntLoop int8 = int16_mul_add_loop_generic;
  std::vector<int> int8_chains = {8, 12};
  ReadLoop read = read_stream_generic;
};

LevelLoops level_loops() {
  LevelLoops l;
#if defined(QUANTKV_X86_CEILINGS)
  if (active_isa() == IsaLevel::kAvx512) {
    if (cpu_features().avx512bf16) {
      l.f32 = bf16_dot_loop_avx512bf16;
      l.f32_chains = {8, 12, 16};
    } else {
      // No vdpbf16ps (Ice Lake / Cascade Lake servers): the kernel table runs the AVX2 f32 FMA
      // kernels for the bf16 dot products, so their ceiling is the AVX2 path's.
      l.f32 = f32_fma_loop_avx2;
      l.f32_chains = {8, 10, 12};
    }
    l.int8 = int8_dot_loop_avx512;
    l.int8_chains = {8, 12, 16};
    l.read = read_stream_avx512;
  } else if (active_isa() == IsaLevel::kAvx2) {
    l.f32 = f32_fma_loop_avx2;  // no bf16 dot: the f32 FMA rate is the AVX2 path's ceiling
    l.f32_chains = {8, 10, 12};
    l.int8 = int8_dot_loop_avx2;
    l.int8_chains = {6, 8, 10};
    l.read = read_stream_avx2;
  }
#endif
  return l;
}

}  // namespace

double measure_bf16_dot_gflops(int threads, double seconds) {
  const LevelLoops l = level_loops();
  return 2 * best_macs<float>(threads, seconds, l.f32_chains, l.f32) / 1e9;
}

double measure_f32_fma_gflops(int threads, double seconds) {
  F32Loop loop = f32_mul_add_loop_generic;
  std::vector<int> chains = {8, 12};
#if defined(QUANTKV_X86_CEILINGS)
  if (active_isa() == IsaLevel::kAvx512) {
    loop = f32_fma_loop_avx512;
    chains = {8, 12, 16};
  } else if (active_isa() == IsaLevel::kAvx2) {
    loop = f32_fma_loop_avx2;
    chains = {8, 10, 12};
  }
#endif
  return 2 * best_macs<float>(threads, seconds, chains, loop) / 1e9;
}

double measure_int8_dot_gops(int threads, double seconds) {
  const LevelLoops l = level_loops();
  return 2 * best_macs<int32_t>(threads, seconds, l.int8_chains, l.int8) / 1e9;
}

double measure_read_gbs(int threads, double seconds) {
  // 1 GiB: several times any last-level cache we run on (this VM reports a 260 MiB L3, so a
  // 256 MiB buffer would partly be read from cache and overstate the bandwidth).
  const int64_t n = (int64_t(1) << 30) / int64_t(sizeof(uint64_t));
  std::unique_ptr<uint64_t[]> buf(new uint64_t[std::size_t(n)]);  // not touched yet
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) buf[i] = uint64_t(i);  // touched (paged in) before timing
  // Windows of 32 MiB (a few milliseconds), read by all threads at once in 1 MiB pieces
  // handed out dynamically (as the kernels hand out their work: a thread descheduled by
  // another process does not hold the window up), walking the buffer so that no window is
  // still cached when read again: the best window (see best_rate for why short windows). At
  // least one pass over the buffer.
  const ReadLoop read = level_loops().read;
  const int64_t window = (int64_t(32) << 20) / int64_t(sizeof(uint64_t));
  const int64_t piece = (int64_t(1) << 20) / int64_t(sizeof(uint64_t));
  double best = 0;
  const auto start = Clock::now();
  for (int64_t w = 0;
       w < n / window || std::chrono::duration<double>(Clock::now() - start).count() < seconds;
       ++w) {
    const int64_t w0 = (w % (n / window)) * window;
    const auto t0 = Clock::now();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = w0; i < w0 + window; i += piece) keep(read(buf.get() + i, piece));
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, double(window) * sizeof(uint64_t) / dt / 1e9);
  }
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
