#include "synthetic.hpp"

#include <algorithm>
#include <cmath>

#include "core/threads.hpp"
#include "quantkv/context.hpp"

namespace quantkv::tool {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform in (0, 1]: 24 random bits, never 0 (the log below needs that).
float unit_uniform(uint64_t& state) { return float((splitmix64(state) >> 40) + 1) * 0x1p-24f; }

uint64_t row_state(uint64_t seed, uint64_t tensor_id, int64_t row) {
  uint64_t s = seed ^ (tensor_id * 0xD1B54A32D192ED03ull);
  s = splitmix64(s) ^ uint64_t(row);
  return splitmix64(s);
}

Context with_threads(int threads) {
  Context ctx;
  ctx.num_threads = threads;
  return ctx;
}

}  // namespace

void fill_normal(float* data, int64_t rows, int64_t cols, float stddev, uint64_t seed,
                 uint64_t tensor_id, int threads) {
  // ~50 ns per value (log, sqrt, sin, cos): a few hundred values already pay for a thread.
  const int used = threads_for_work(with_threads(threads), double(rows) * double(cols) * 64.0,
                                    kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(used) if (used > 1)
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t state = row_state(seed, tensor_id, r);
    float* row = data + r * cols;
    // Box-Muller: two normals per pair of uniforms.
    for (int64_t c = 0; c < cols; c += 2) {
      const float radius = stddev * std::sqrt(-2.0f * std::log(unit_uniform(state)));
      const float angle = 6.2831853f * unit_uniform(state);
      row[c] = radius * std::cos(angle);
      if (c + 1 < cols) row[c + 1] = radius * std::sin(angle);
    }
  }
}

void fill_bytes(uint8_t* data, int64_t count, uint8_t lo, uint8_t hi, uint64_t seed, int threads) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  const uint64_t span = uint64_t(hi) - lo + 1;
  const int used = threads_for_work(with_threads(threads), double(count), kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(used) if (used > 1)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    uint64_t state = row_state(seed, 0xB17E5, ch);
    const int64_t end = std::min(count, (ch + 1) * kChunk);
    for (int64_t i = ch * kChunk; i < end; ++i) {
      data[i] = uint8_t(lo + (splitmix64(state) >> 32) % span);
    }
  }
}

}  // namespace quantkv::tool
