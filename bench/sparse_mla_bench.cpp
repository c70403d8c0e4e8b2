// Sparse MLA attention (quantkv/sparse_mla.hpp) on DeepSeek-V3.2's shapes (d_v = 512, d_rope =
// 64, top_k = 2048), with the machine's ceilings measured in the same run at the same thread
// count and ISA level (QUANTKV_ISA=avx2 runs the AVX2 kernels):
//   BM_SparseMla/<cache>/H/T/threads     cache bf16 (1152-byte rows) or fp8 (656-byte rows)
// Counters: rows_MB (the selected rows' bytes, each row once per token: T * top_k * row bytes),
// of_read_bw (rows_MB / time / the read-bandwidth ceiling: the decode figure), GFLOPs and
// of_fma_ceiling (2 H top_k (d_qk + d_v) flops per token / time / the f32 FMA ceiling: the
// prefill figure), read_GBs and fma_ceiling_G (the ceilings themselves).
// The cache holds 2^18 slots (302 MB bf16, 172 MB fp8: beyond the last-level cache) and 8 sets
// of uniformly random slots (no -1) are rotated call by call, so the rows come from memory.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ceilings/ceilings.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/sparse_mla.hpp"

namespace {

using namespace quantkv;

constexpr int64_t kDv = 512, kDrope = 64, kDqk = kDv + kDrope, kTopK = 2048;
constexpr int64_t kSlots = int64_t(1) << 18;
constexpr int kIndexSets = 8;

struct Ceil {
  double fma_gflops = 0, read_gbs = 0;
};

const Ceil& ceilings_at(int threads) {
  static std::map<std::pair<int, IsaLevel>, Ceil> measured;
  const auto key = std::make_pair(threads, active_isa());
  auto it = measured.find(key);
  if (it == measured.end()) {
    Ceil c;
    c.fma_gflops = ceilings::measure_f32_fma_gflops(threads);
    c.read_gbs = ceilings::measure_read_gbs(threads);
    it = measured.emplace(key, c).first;
  }
  return it->second;
}

// The latent cache of the latest form asked for (one at a time: they are hundreds of MB).
// The bytes live in 2 MiB-aligned memory; QUANTKV_BENCH_HUGEPAGES=1 asks the kernel for
// transparent huge pages on it (madvise), as an engine that allocates its cache so would get.
struct Buffer {
  void* p = nullptr;
  explicit Buffer(std::size_t bytes) {
    const std::size_t align = std::size_t(2) << 20;
    p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    if (p == nullptr) std::abort();
#if defined(__linux__)
    const char* env = std::getenv("QUANTKV_BENCH_HUGEPAGES");
    if (env != nullptr && env[0] == '1') madvise(p, bytes, MADV_HUGEPAGE);
#endif
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

struct Cache {
  bool fp8 = false;
  std::unique_ptr<Buffer> buffer;
  uint16_t* bf16 = nullptr;  // [kSlots, kDqk]
  uint8_t* rows = nullptr;   // [kSlots, row bytes]
};

Cache& cache_for(bool fp8) {
  static std::unique_ptr<Cache> slot;
  if (slot != nullptr && slot->fp8 == fp8) return *slot;
  slot.reset();
  auto c = std::make_unique<Cache>();
  c->fp8 = fp8;
  std::mt19937_64 rng(42);
  auto bf16_bits = [&](uint64_t r) {  // a normal-ish value in [-2, 2)
    return float_to_bf16(float(int(r & 0xFFFF) - 32768) * (1.0f / 16384.0f));
  };
  if (fp8) {
    const int64_t row = sparse_mla_fp8_row_bytes(kDv, kDrope);
    c->buffer = std::make_unique<Buffer>(std::size_t(kSlots * row));
    c->rows = static_cast<uint8_t*>(c->buffer->p);
    for (int64_t s = 0; s < kSlots; ++s) {
      uint8_t* r = c->rows + s * row;
      for (int64_t d = 0; d < kDv; d += 8) {
        const uint64_t x = rng();
        for (int64_t i = 0; i < 8; ++i) {
          const uint8_t b = uint8_t(x >> (8 * i));
          r[d + i] = (b & 0x7F) == 0x7F ? uint8_t(b ^ 1) : b;  // no NaN
        }
      }
      for (int64_t b = 0; b < kDv / 128; ++b) {
        const float scale = 1.0f / 256.0f;
        std::memcpy(r + kDv + 4 * b, &scale, 4);
      }
      for (int64_t d = 0; d < kDrope; ++d) {
        const uint16_t v = bf16_bits(rng());
        std::memcpy(r + kDv + 4 * (kDv / 128) + 2 * d, &v, 2);
      }
    }
  } else {
    c->buffer = std::make_unique<Buffer>(std::size_t(kSlots * kDqk) * 2);
    c->bf16 = static_cast<uint16_t*>(c->buffer->p);
    for (int64_t i = 0; i < kSlots * kDqk; ++i) c->bf16[i] = bf16_bits(rng());
  }
  slot = std::move(c);
  return *slot;
}

void BM_SparseMla(benchmark::State& state, bool fp8) {
  const int64_t h = state.range(0), t = state.range(1);
  const int threads = int(state.range(2));
  const Ceil& ceil = ceilings_at(threads);
  Cache& cache = cache_for(fp8);
  std::mt19937_64 rng(7);
  std::vector<uint16_t> q(std::size_t(t * h * kDqk));
  for (auto& v : q) v = float_to_bf16(float(int(rng() % 2001) - 1000) * 1e-3f);
  std::vector<std::vector<int32_t>> sets(kIndexSets, std::vector<int32_t>(std::size_t(t * kTopK)));
  for (auto& s : sets)
    for (auto& i : s) i = int32_t(rng() % uint64_t(kSlots));
  std::vector<bfloat16> out(std::size_t(t * h * kDv));
  std::vector<float> lse(std::size_t(t * h));
  SparseMlaArgs a;
  a.q = make_view<const bfloat16>(reinterpret_cast<const bfloat16*>(q.data()), t, h, kDqk);
  const int64_t row_bytes = fp8 ? sparse_mla_fp8_row_bytes(kDv, kDrope) : 2 * kDqk;
  if (fp8) {
    a.kv_fp8 = make_view<const uint8_t>(cache.rows, kSlots, row_bytes);
  } else {
    a.kv = make_view<const bfloat16>(reinterpret_cast<const bfloat16*>(cache.bf16), kSlots, kDqk);
  }
  a.sm_scale = 0.0416667f;  // 1 / sqrt(576)
  a.out = make_view(out.data(), t, h, kDv);
  a.lse = make_view(lse.data(), t, h);
  Context ctx;
  ctx.num_threads = threads;
  std::size_t call = 0;
  for (auto _ : state) {
    a.indices = make_view<const int32_t>(sets[call % sets.size()].data(), t, kTopK);
    const Status s = sparse_mla_attention(a, ctx);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::ClobberMemory();
    ++call;
  }
  const double bytes = double(t) * double(kTopK) * double(row_bytes);
  const double flops = 2.0 * double(t) * double(h) * double(kTopK) * double(kDqk + kDv);
  const double iters = double(state.iterations());
  using benchmark::Counter;
  state.SetLabel(isa_level_name(active_isa()));
  state.counters["rows_MB"] = bytes / 1e6;
  state.counters["of_read_bw"] = Counter(bytes * iters / 1e9 / ceil.read_gbs, Counter::kIsRate);
  state.counters["GFLOPs"] = Counter(flops * iters / 1e9, Counter::kIsRate);
  state.counters["of_fma_ceiling"] =
      Counter(flops * iters / 1e9 / ceil.fma_gflops, Counter::kIsRate);
  state.counters["read_GBs"] = ceil.read_gbs;
  state.counters["fma_ceiling_G"] = ceil.fma_gflops;
}

void register_all() {
  for (bool fp8 : {false, true}) {
    const std::string name = std::string("BM_SparseMla/") + (fp8 ? "fp8" : "bf16");
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_SparseMla, fp8);
    b->ArgNames({"H", "T", "threads"});
    for (int threads : {1, 2})
      for (int64_t t : {1, 64})
        for (int64_t h : {16, 64, 128}) b->Args({h, t, threads});
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  }
}
const int kRegistered = (register_all(), 0);

}  // namespace
