#include "bench_shapes.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace quantkv::tool {

const char* ceiling_name(CeilingKind kind) {
  switch (kind) {
    case CeilingKind::kBf16Dot:
      return "bf16 dot";
    case CeilingKind::kInt8Dot:
      return "int8 dot";
    case CeilingKind::kReadBandwidth:
      return "read bw";
  }
  return "?";
}

namespace {
double compute_ceiling(CeilingKind kind, const ceilings::Ceilings& c) {
  return kind == CeilingKind::kInt8Dot ? c.int8_gops : c.bf16_gflops;
}
}  // namespace

CeilingKind BenchResult::bound(const ceilings::Ceilings& c) const {
  return c.read_gbs * intensity() < compute_ceiling(compute, c) ? CeilingKind::kReadBandwidth
                                                                : compute;
}

double BenchResult::ratio(const ceilings::Ceilings& c) const {
  return bound(c) == CeilingKind::kReadBandwidth ? gbs() / c.read_gbs
                                                 : gflops() / compute_ceiling(compute, c);
}

namespace {

// Reads a buffer twice the size of the largest last-level cache we expect (256 MiB), which
// evicts whatever the previous run left there.
void evict_caches(int threads) {
  static std::vector<uint64_t> buffer((std::size_t(512) << 20) / sizeof(uint64_t), 1);
  uint64_t sum = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(^ : sum)
  for (std::size_t i = 0; i < buffer.size(); i += 8) sum ^= buffer[i];  // one read per line
  buffer[sum % buffer.size()] += 1;                                     // keep the reads
}

}  // namespace

Status time_call(const BenchPlan& plan, bool cold, const std::function<Status()>& fn,
                 double* median_seconds, int* reps) {
  using Clock = std::chrono::steady_clock;
  auto once = [&](double* seconds) {
    if (cold) evict_caches(plan.threads);
    const auto t0 = Clock::now();
    Status status = fn();
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return status;
  };
  double warm = 0;
  QUANTKV_RETURN_IF_ERROR(once(&warm));
  // Enough runs to fill min_seconds; a run of several seconds is timed once more only.
  int count = int(std::ceil(plan.min_seconds() / std::max(warm, 1e-9)));
  count = std::clamp(count, plan.min_reps(), plan.max_reps());
  if (warm > 3.0) count = 1;
  std::vector<double> times(static_cast<std::size_t>(count));
  for (double& t : times) QUANTKV_RETURN_IF_ERROR(once(&t));
  std::sort(times.begin(), times.end());
  *median_seconds = count % 2 ? times[count / 2] : 0.5 * (times[count / 2 - 1] + times[count / 2]);
  *reps = count;
  return Status::Ok();
}

}  // namespace quantkv::tool
