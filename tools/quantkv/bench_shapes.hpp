// The standard shapes `quantkv bench` times, and how one shape is timed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ceilings/ceilings.hpp"
#include "quantkv/status.hpp"

namespace quantkv::tool {

// Which ceiling a result is compared with.
enum class CeilingKind { kBf16Dot, kInt8Dot, kReadBandwidth };
const char* ceiling_name(CeilingKind kind);  // "bf16 dot", "int8 dot", "read bw"

struct BenchResult {
  std::string op;      // "indexer" | "qkv"
  std::string name;    // e.g. "decode B=8x1 @ 32K"
  std::string shape;   // e.g. "H=64 D=128 top_k=2048 page=64"
  double seconds = 0;  // median of the timed runs
  int reps = 0;
  double flops = 0;  // operations of one run (2 per multiply-add)
  double bytes = 0;  // distinct bytes one run must read or write at least
  CeilingKind compute = CeilingKind::kBf16Dot;  // the operation's compute roof

  double gflops() const { return flops / seconds / 1e9; }
  double gbs() const { return bytes / seconds / 1e9; }
  double intensity() const { return flops / bytes; }  // flops per byte
  // The roof of the roofline that binds at this intensity: the compute ceiling, or the read
  // bandwidth when bandwidth x intensity is below it (QKV at small M on most machines, but
  // M = 16 is compute-bound on a 2-core AVX2 machine).
  CeilingKind bound(const ceilings::Ceilings& c) const;
  // Achieved rate over the roofline: GFLOP/s over min(compute ceiling, read GB/s x intensity)
  // (equal to GB/s over the read bandwidth when that binds).
  double ratio(const ceilings::Ceilings& c) const;
};

struct BenchPlan {
  bool quick = false;  // small shapes, short timing: under a minute on 2 cores
  int threads = 1;
  bool progress = false;
  double min_seconds() const { return quick ? 0.05 : 0.3; }
  int min_reps() const { return quick ? 1 : 3; }
  int max_reps() const { return quick ? 3 : 20; }
};

// Runs `fn` once to warm up, then enough times for the plan; the median of the timed runs.
// With `cold`, the caches are flushed before every run, untimed: a bandwidth-bound shape then
// streams its operands from memory, as in a model whose layers do not all fit in the
// last-level cache, instead of from a cache the previous run warmed (also with --quick: its
// small shapes would fit in the cache and run above the memory's read bandwidth).
Status time_call(const BenchPlan& plan, bool cold, const std::function<Status()>& fn,
                 double* median_seconds, int* reps);

// DeepSeek-V3.2's indexer (H 64, D 128, top-k 2048, page 64): prefill of 4096 tokens (causal,
// empty cache) and decode of 8 sequences x 1 token at 32K and 128K cached tokens.
Status bench_indexer(const BenchPlan& plan, std::vector<BenchResult>* results);
// NVFP4 fused QKV, Llama-3-8B-like (K 4096, N 6144) and Llama-70B-like (K 8192, N 10240)
// at M = 1, 16 (decode), 512, 2048 (prefill).
Status bench_qkv(const BenchPlan& plan, std::vector<BenchResult>* results);

}  // namespace quantkv::tool
