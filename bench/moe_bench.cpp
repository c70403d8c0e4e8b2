// The fused experts (quantkv/moe.hpp) on two real layers' shapes, with random top-k routing from
// a fixed seed, and the machine's ceilings measured in the same run at the same thread count:
//   BM_Moe/<model>/<mode>/T/threads
//     gpt_oss_20b    H 2880, I 2880, E 32, top-4, MXFP4, interleaved gate/up, SwiGLU-OAI, biases
//     qwen3_30b_a3b  H 2048, I 768, E 128, top-8, NVFP4, halves, SiLU
//     mode w4a16 (weight-only, bf16 x and h) or w4a4 (x and h quantised per routed row)
// Counters: routed (distinct experts a call touches, averaged over the routings), routed_MB (their
// weight bytes as checkpoints store them: codes + 1-byte block scales), weight_GBs and of_read_bw
// (routed bytes / time / the read-bandwidth ceiling: the decode figure), GFLOPs and of_dot_ceiling
// (2 T k (2I H + H I) / time / the bf16-dot (w4a16) or int8-dot (w4a4) ceiling the linear layer's
// benchmarks use: the prefill figure), read_GBs and dot_ceiling_G (the ceilings themselves); at
// T = 1 also best_GBs (the fastest call's routed bytes / its time), best_read_GBs (the read
// ceiling measured again after the calls, the best so far) and best_of_read_bw, their ratio.
// Three copies of the layer's prepared experts (over 1 GB, several times the last-level cache) and
// 16 routings are rotated call by call, so the routed experts stream from memory as they would in
// a model whose other layers evict them.
// The layers, weights, routings and input are bench/moe_layers.hpp's (shared with
// bench/ggml_moe_bench.cpp, which runs ggml on the same ones).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ceilings/ceilings.hpp"
#include "moe_layers.hpp"
#include "quantkv/moe.hpp"

namespace {

using namespace quantkv;

using moe_layers::kGptOss20B;
using moe_layers::kQwen3A3B;
using moe_layers::MoeModel;
using moe_layers::Routing;

const ceilings::Ceilings& ceilings_at(int threads) {
  static std::map<int, ceilings::Ceilings> measured;
  auto it = measured.find(threads);
  if (it == measured.end()) {
    ceilings::Ceilings c;
    c.int8_gops = ceilings::measure_int8_dot_gops(threads);
    c.bf16_gflops = ceilings::measure_bf16_dot_gflops(threads);
    c.read_gbs = ceilings::measure_read_gbs(threads);
    it = measured.emplace(threads, c).first;
  }
  return it->second;
}

constexpr std::size_t kCopies = 3;

// One model's layer: random codes and scales, prepared once and copied; only the latest model
// is kept.
struct Layer {
  MoeModel model{};
  std::vector<PreparedExperts> copies;
  std::vector<float> b13, b2;  // [E, 2I], [E, H]
  double expert_bytes = 0;     // codes + block scales of one expert's w13 and w2
};

Layer& layer_for(const MoeModel& m) {
  static std::unique_ptr<Layer> slot;
  if (slot != nullptr && std::string(slot->model.name) == m.name) return *slot;
  slot.reset();
  auto l = std::make_unique<Layer>();
  l->model = m;
  moe_layers::RawExperts raw = moe_layers::make_raw_experts(m);
  l->expert_bytes = raw.expert_bytes;
  l->copies.resize(kCopies);
  if (!prepare_experts(raw.source(m), &l->copies[0], Context{}).ok()) std::abort();
  for (std::size_t c = 1; c < kCopies; ++c) l->copies[c] = l->copies[0];
  l->b13 = std::move(raw.b13);
  l->b2 = std::move(raw.b2);
  slot = std::move(l);
  return *slot;
}

void BM_Moe(benchmark::State& state, MoeModel model, bool quantised) {
  const int64_t t = state.range(0);
  const int threads = int(state.range(1));
  const ceilings::Ceilings& ceil = ceilings_at(threads);
  Layer& l = layer_for(model);
  const std::vector<Routing> routings = moe_layers::make_routings(model, t);
  const int64_t h = model.hidden, k = model.top_k;
  const std::vector<bfloat16> x = moe_layers::make_input(t, h);
  std::vector<bfloat16> y(std::size_t(t * h));
  FusedExpertsArgs a =
      moe_layers::fused_args(model, t, quantised, x.data(), y.data(), l.b13.data(), l.b2.data());
  Context ctx;
  ctx.num_threads = threads;
  std::size_t call = 0;
  ceilings::BestRate best;
  for (auto _ : state) {
    const Routing& r = routings[call % routings.size()];
    a.experts = &l.copies[call % l.copies.size()];
    moe_layers::route(a, r, t, k);
    best.start();
    const Status s = fused_experts(a, ctx);
    best.stop(double(r.distinct) * l.expert_bytes);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::ClobberMemory();
    ++call;
  }
  double distinct = 0;
  for (const Routing& r : routings) distinct += double(r.distinct);
  distinct /= double(routings.size());
  const double bytes = distinct * l.expert_bytes;
  const double flops = 2.0 * double(t * k) *
                       (2.0 * double(model.inter) * double(h) + double(h) * double(model.inter));
  const double dot = quantised ? ceil.int8_gops : ceil.bf16_gflops;
  const double iters = double(state.iterations());
  using benchmark::Counter;
  state.counters["routed"] = distinct;
  state.counters["routed_MB"] = bytes / 1e6;
  state.counters["weight_GBs"] = Counter(bytes * iters / 1e9, Counter::kIsRate);
  state.counters["of_read_bw"] = Counter(bytes * iters / 1e9 / ceil.read_gbs, Counter::kIsRate);
  state.counters["GFLOPs"] = Counter(flops * iters / 1e9, Counter::kIsRate);
  state.counters["of_dot_ceiling"] = Counter(flops * iters / 1e9 / dot, Counter::kIsRate);
  state.counters["read_GBs"] = ceil.read_gbs;
  state.counters["dot_ceiling_G"] = dot;
  if (t == 1) {  // decode: the fastest call against the best read window (ceilings::BestRate)
    const double read = ceilings::best_read_gbs(threads, ceil.read_gbs);
    state.counters["best_GBs"] = best.gbs;
    state.counters["best_read_GBs"] = read;
    state.counters["best_of_read_bw"] = best.gbs / read;
  }
}

void register_all() {
  for (const MoeModel& m : {kGptOss20B, kQwen3A3B}) {
    for (bool quantised : {false, true}) {
      const std::string name = std::string("BM_Moe/") + m.name + (quantised ? "/w4a4" : "/w4a16");
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Moe, m, quantised);
      b->ArgNames({"T", "threads"});
      for (int threads : {1, 2})
        for (int64_t t : {1, 16, 512}) b->Args({t, threads});
      b->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
}
const int kRegistered = (register_all(), 0);

}  // namespace
