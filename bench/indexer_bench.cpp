// The lightning indexer at DeepSeek-V3.2 shapes (H = 64, D = 128, top_k = 2048, page 64):
// prefill of 4096 causal tokens with 0 and 28K cached tokens, decode of 8 sequences x 1 token
// at 32K and 128K context, MTP decode of B sequences x next_n rows (BM_Indexer_DecodeMtp8_32K,
// next_n 1..4 and 8; BM_Indexer_DecodeMtp2_128K, next_n 1 and 4; row i of a sequence of context L
// sees L - next_n + i + 1 keys: its time should grow with next_n, not faster; row_us is the
// time per query row, score_MiB the fp32 score rows top-k reads); the same cases
// over the engines' layout of the K cache (vLLM / SGLang / DeepGEMM: per page the fp8 rows, then
// the float scales; BM_IndexerEngine_*), with global-slot output, next to the MAX layout in the
// same run; and over the MXFP4 form of the engines' layout (DeepSeek-V4's use_fp4_cache: per
// page the D/2 e2m1 bytes of each key, then its D/32 ue8m0 bytes; BM_IndexerMxfp4_*), next to
// the fp8 engine layout on the same shapes (decode B = 8 @ 32K, B = 2 @ 128K, MTP next_n = 4,
// prefill; BM_IndexerNvfp4_* the NVFP4 form on the decode shapes): the FP4 cache halves the K
// bytes, the scores cost the same flops. Counters:
//   GFLOPs      effective rate, 2 * (visible query-key pairs) * H * D / time
//   ceiling     the vdpbf16ps peak measured in the same run (bench/ceilings; f32 FMA without
//               AVX-512 BF16, as the kernels then), GFLOP/s
//   of_ceiling  GFLOPs / ceiling
//   topk_share  share of the call's time spent in top-k selection
//   chunks      token chunks the 512 MiB scores budget required
//   extra_MiB   extra memory of the call (score rows, staged q, thread scratch)
// The development machine is shared and often oversubscribed, which wall-clock rates cannot
// see through; so also, by CPU time (robust to time-slicing):
//   core_GFLOPs      flops / process CPU seconds (all threads, spin-waits included)
//   core_ceiling     the vdpbf16ps loop's rate on one thread by its thread CPU time (the f32
//                    FMA loop on a CPU without AVX-512 BF16, as the kernels then)
//   of_core_ceiling  core_GFLOPs / core_ceiling
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "ceilings/ceilings.hpp"
#include "ceilings/ceilings_kernels.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"

namespace {

using namespace quantkv;

constexpr int64_t kHeads = 64, kDim = 128, kTopK = 2048, kPage = 64;

double bf16_ceiling() {
  static const double gflops = ceilings::measure_bf16_dot_gflops(omp_get_max_threads());
  return gflops;
}

double cpu_seconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The bf16 ceiling of one core by thread CPU time: best of a few runs of the ceiling loop.
double bf16_core_ceiling() {
  static const double gflops = [] {
    double best = 0;
    float sink = 0;
    // vdpbf16ps needs AVX-512 BF16 (the avx512 level alone does not imply it); without it the
    // indexer runs its AVX2 kernel (f32 FMA), so that loop is the ceiling.
    // The active level (QUANTKV_ISA=avx2 runs the AVX2 kernel, so its loop is the ceiling).
    const bool bf16 = active_isa() == IsaLevel::kAvx512 && cpu_features().avx512bf16;
    if (!bf16 && active_isa() < IsaLevel::kAvx2) return 0.0;
#if defined(QUANTKV_X86_KERNELS)
    for (int r = 0; r < 6; ++r) {
      const double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
      const int64_t macs = bf16
                               ? ceilings::bf16_dot_loop_avx512bf16(8 + 4 * (r % 3), 4000000, &sink)
                               : ceilings::f32_fma_loop_avx2(6 + 2 * (r % 4), 4000000, &sink);
      best =
          std::max(best, 2.0 * double(macs) / (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0) * 1e-9);
    }
#endif
    benchmark::DoNotOptimize(sink);
    return best;
  }();
  return gflops;
}

// Random e4m3 codes (never NaN) from a fast xorshift; the values do not matter for speed.
void fill_codes(uint8_t* p, std::size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint8_t c = uint8_t(x >> 24);
    if ((c & 0x7F) == 0x7F) c ^= 1;
    p[i] = c;
  }
}

struct IndexerCase {
  std::vector<int64_t> seq_lens, cache_lens;
  MaskType mask = MaskType::kCausal;
  PagedKVCache cache;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  std::vector<uint32_t> offs;
  std::vector<int32_t> out;
  int64_t T = 0;
  double visible_pairs = 0;
  // The same page table over an engine-layout buffer (filled like the MAX cache).
  std::vector<float> engine_storage;
  EngineIndexerKCache engine;
  // And in the MXFP4 form (random codes, block scales 2^[-2, 2]).
  std::vector<uint8_t> mxfp4_storage;
  EngineIndexerKCache mxfp4;
  // And in the NVFP4 form (random codes, e4m3 block scales in [1, 2.75], global scale 2).
  std::vector<uint8_t> nvfp4_storage;
  EngineIndexerKCache nvfp4;
};

// Keys as random codes and scales as the MAX cache's, in the engines' layout.
void make_engine_copy(IndexerCase& c) {
  const PagedKVCacheCollection v = c.cache.view();
  EngineIndexerKCache& e = c.engine;
  e.num_blocks = v.num_blocks;
  e.page_size = v.page_size;
  e.head_size = v.head_size;
  e.cache_lengths = v.cache_lengths;
  e.lookup_table = v.lookup_table;
  c.engine_storage.resize(std::size_t(e.num_blocks * e.page_bytes() / 4));
  e.data = reinterpret_cast<uint8_t*>(c.engine_storage.data());
  for (int64_t page = 0; page < e.num_blocks; ++page) {
    fill_codes(e.data + e.key_offset(page, 0), std::size_t(e.page_size * e.head_size),
               uint64_t(page) + 7);
    for (int64_t slot = 0; slot < e.page_size; ++slot) {
      const float s = 0.5f + float((page * e.page_size + slot) % 7) * 0.1f;
      std::memcpy(e.data + e.scale_offset(page, slot), &s, sizeof(float));
    }
  }
}

void make_mxfp4_copy(IndexerCase& c) {
  EngineIndexerKCache& e = c.mxfp4;
  e = c.engine;
  e.format = IndexKFormat::kMxfp4;
  e.page_stride_bytes = 0;
  c.mxfp4_storage.resize(std::size_t(e.num_blocks * e.page_bytes()));
  e.data = c.mxfp4_storage.data();
  fill_codes(e.data, c.mxfp4_storage.size(), 5);
  for (int64_t page = 0; page < e.num_blocks; ++page) {
    for (int64_t slot = 0; slot < e.page_size; ++slot) {
      uint8_t* sf = e.data + e.scale_offset(page, slot);
      for (int64_t b = 0; b < e.head_size / 32; ++b) sf[b] = uint8_t(125 + (page + slot + b) % 5);
    }
  }
}

void make_nvfp4_copy(IndexerCase& c) {
  EngineIndexerKCache& e = c.nvfp4;
  e = c.mxfp4;
  e.format = IndexKFormat::kNvfp4;
  e.global_scale = 2.0f;
  c.nvfp4_storage.resize(std::size_t(e.num_blocks * e.page_bytes()));
  e.data = c.nvfp4_storage.data();
  fill_codes(e.data, c.nvfp4_storage.size(), 9);
  for (int64_t page = 0; page < e.num_blocks; ++page) {
    for (int64_t slot = 0; slot < e.page_size; ++slot) {
      uint8_t* sf = e.data + e.scale_offset(page, slot);
      for (int64_t b = 0; b < e.head_size / 16; ++b)
        sf[b] = uint8_t(0x38 + (page + slot + b) % 12);  // e4m3 1.0 .. 2.75
    }
  }
}

std::unique_ptr<IndexerCase> make_case(std::vector<int64_t> seq_lens,
                                       std::vector<int64_t> cache_lens) {
  auto c = std::make_unique<IndexerCase>();
  c->seq_lens = seq_lens;
  c->cache_lens = cache_lens;
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kE4M3;
  cfg.kv_dim = 1;
  cfg.num_layers = 1;
  cfg.page_size = kPage;
  cfg.num_heads = 1;
  cfg.head_size = kDim;
  cfg.scale_granularity = kDim;
  cfg.batch_size = int64_t(seq_lens.size());
  int64_t pages = 0, max_pages = 1;
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    const int64_t need = (seq_lens[b] + cache_lens[b] + kPage - 1) / kPage;
    pages += need;
    max_pages = std::max(max_pages, need);
  }
  cfg.num_blocks = pages;
  cfg.max_pages_per_seq = max_pages;
  if (!PagedKVCache::create(cfg, 1, &c->cache).ok()) return nullptr;
  c->offs.push_back(0);
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    (void)c->cache.reserve(int64_t(b), seq_lens[b] + cache_lens[b]);
    (void)c->cache.set_cache_length(int64_t(b), cache_lens[b]);
    c->offs.push_back(c->offs.back() + uint32_t(seq_lens[b]));
    for (int64_t i = 0; i < seq_lens[b]; ++i) c->visible_pairs += double(cache_lens[b] + i + 1);
  }
  c->T = c->offs.back();
  fill_codes(c->cache.raw_blocks().data(), c->cache.raw_blocks().size(), 7);
  for (std::size_t i = 0; i < c->cache.raw_scales().size(); ++i)
    c->cache.raw_scales()[i] = 0.5f + float(i % 7) * 0.1f;
  c->q.resize(std::size_t(c->T * kHeads * kDim));
  fill_codes(reinterpret_cast<uint8_t*>(c->q.data()), c->q.size(), 11);
  c->q_s.resize(std::size_t(c->T * kHeads));
  for (std::size_t i = 0; i < c->q_s.size(); ++i) c->q_s[i] = float(int(i % 13) - 4) * 0.05f;
  c->out.resize(std::size_t(c->T * kTopK));
  make_engine_copy(*c);
  make_mxfp4_copy(*c);
  make_nvfp4_copy(*c);
  return c;
}

enum class Layout { kMax, kEngine, kEngineMxfp4, kEngineNvfp4 };

// One call in the chosen layout (the engine layout with global-slot output, as a sparse
// attention kernel consumes it).
Status run_once(IndexerCase& c, const PagedKVCacheCollection& view, Layout layout,
                IndexerTimings* tm) {
  const auto out = make_view(c.out.data(), c.T, kTopK);
  const auto q = make_view<const float8_e4m3fn>(c.q.data(), c.T, kHeads, kDim);
  const auto q_s = make_view<const float>(c.q_s.data(), c.T, kHeads);
  const auto offs = make_view<const uint32_t>(c.offs.data(), int64_t(c.offs.size()));
  if (layout != Layout::kMax) {
    return mla_indexer_ragged_float8_paged(
        out, q, q_s, offs, layout == Layout::kEngine ? c.engine : c.mxfp4, c.mask, Context{},
        IndexerOptions{IndexOutput::kGlobalSlots, tm});
  }
  return mla_indexer_ragged_float8_paged(out, q, q_s, offs, view, 0, c.mask, Context{}, tm);
}

void run_case(benchmark::State& state, IndexerCase& c, Layout layout = Layout::kMax) {
  const double ceiling = bf16_ceiling();
  const PagedKVCacheCollection view = c.cache.view();
  IndexerTimings tm;
  double total = 0, topk = 0, cpu = 0;
  int64_t chunks = 0, bytes = 0;
  for (auto _ : state) {
    const double c0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
    const Status st = run_once(c, view, layout, &tm);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    cpu += cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    total += tm.score_seconds + tm.topk_seconds;
    topk += tm.topk_seconds;
    chunks = tm.chunks;
    bytes = tm.workspace_bytes;
  }
  const double flops = 2.0 * c.visible_pairs * kHeads * kDim;
  state.counters["GFLOPs"] =
      benchmark::Counter(flops * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["ceiling"] = ceiling;
  state.counters["of_ceiling"] = flops * 1e-9 * double(state.iterations()) / total / ceiling;
  state.counters["topk_share"] = topk / total;
  state.counters["chunks"] = double(chunks);
  state.counters["core_GFLOPs"] = flops * 1e-9 * double(state.iterations()) / cpu;
  state.counters["core_ceiling"] = bf16_core_ceiling();
  state.counters["of_core_ceiling"] =
      flops * 1e-9 * double(state.iterations()) / cpu / bf16_core_ceiling();
  state.counters["extra_MiB"] = double(bytes) / double(1 << 20);
  state.counters["row_us"] = total / double(state.iterations()) / double(c.T) * 1e6;
  state.counters["score_MiB"] = c.visible_pairs * sizeof(float) / double(1 << 20);
  // Bytes of one key in the layout read (the MAX collection's fp8 rows hold the same as the
  // engines' fp8 form).
  state.counters["key_bytes"] = layout == Layout::kEngineMxfp4   ? double(kDim / 2 + kDim / 32)
                                : layout == Layout::kEngineNvfp4 ? double(kDim / 2 + kDim / 16)
                                                                 : double(kDim + 4);
}

IndexerCase& prefill_cache0() {
  static auto c = make_case({4096}, {0});
  return *c;
}
IndexerCase& decode_32k() {
  static auto c = make_case(std::vector<int64_t>(8, 1), std::vector<int64_t>(8, 32 * 1024 - 1));
  return *c;
}
IndexerCase& decode_128k() {
  static auto c = make_case(std::vector<int64_t>(8, 1), std::vector<int64_t>(8, 128 * 1024 - 1));
  return *c;
}

// MTP decode: B sequences of context L, next_n rows each (cache L - next_n); next_n 1..8.
IndexerCase& decode_mtp(int64_t B, int64_t L, int64_t next_n) {
  static std::unique_ptr<IndexerCase> cases[2][9];
  std::unique_ptr<IndexerCase>& c = cases[L > 32 * 1024 ? 1 : 0][next_n];
  if (!c) c = make_case(std::vector<int64_t>(B, next_n), std::vector<int64_t>(B, L - next_n));
  return *c;
}

void BM_Indexer_Prefill4096_Cache0(benchmark::State& state) { run_case(state, prefill_cache0()); }
BENCHMARK(BM_Indexer_Prefill4096_Cache0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_Indexer_Prefill4096_Cache28K(benchmark::State& state) {
  static auto c = make_case({4096}, {28 * 1024});
  run_case(state, *c);
}
BENCHMARK(BM_Indexer_Prefill4096_Cache28K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

void BM_Indexer_Decode8x1_32K(benchmark::State& state) { run_case(state, decode_32k()); }
BENCHMARK(BM_Indexer_Decode8x1_32K)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

void BM_Indexer_Decode8x1_128K(benchmark::State& state) { run_case(state, decode_128k()); }
BENCHMARK(BM_Indexer_Decode8x1_128K)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

void BM_Indexer_DecodeMtp8_32K(benchmark::State& state) {
  run_case(state, decode_mtp(8, 32 * 1024, state.range(0)));
}
BENCHMARK(BM_Indexer_DecodeMtp8_32K)
    ->ArgName("next_n")
    ->DenseRange(1, 4)
    ->Arg(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_Indexer_DecodeMtp2_128K(benchmark::State& state) {
  run_case(state, decode_mtp(2, 128 * 1024, state.range(0)));
}
BENCHMARK(BM_Indexer_DecodeMtp2_128K)
    ->ArgName("next_n")
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// The engines' layout: same shapes, same page tables, global slots out.
void BM_IndexerEngine_Prefill4096_Cache0(benchmark::State& state) {
  run_case(state, prefill_cache0(), Layout::kEngine);
}
BENCHMARK(BM_IndexerEngine_Prefill4096_Cache0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerEngine_Decode8x1_32K(benchmark::State& state) {
  run_case(state, decode_32k(), Layout::kEngine);
}
BENCHMARK(BM_IndexerEngine_Decode8x1_32K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerEngine_Decode8x1_128K(benchmark::State& state) {
  run_case(state, decode_128k(), Layout::kEngine);
}
BENCHMARK(BM_IndexerEngine_Decode8x1_128K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// B = 2 @ 128K in the fp8 engine layout, then every decode shape in the MXFP4 form, in the
// same run as the fp8 figures above.
IndexerCase& decode2_128k() {
  static auto c = make_case(std::vector<int64_t>(2, 1), std::vector<int64_t>(2, 128 * 1024 - 1));
  return *c;
}
void BM_IndexerEngine_Decode2x1_128K(benchmark::State& state) {
  run_case(state, decode2_128k(), Layout::kEngine);
}
BENCHMARK(BM_IndexerEngine_Decode2x1_128K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerMxfp4_Prefill4096_Cache0(benchmark::State& state) {
  run_case(state, prefill_cache0(), Layout::kEngineMxfp4);
}
BENCHMARK(BM_IndexerMxfp4_Prefill4096_Cache0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerMxfp4_Decode8x1_32K(benchmark::State& state) {
  run_case(state, decode_32k(), Layout::kEngineMxfp4);
}
BENCHMARK(BM_IndexerMxfp4_Decode8x1_32K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerMxfp4_Decode2x1_128K(benchmark::State& state) {
  run_case(state, decode2_128k(), Layout::kEngineMxfp4);
}
BENCHMARK(BM_IndexerMxfp4_Decode2x1_128K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerMxfp4_DecodeMtp8_32K(benchmark::State& state) {
  run_case(state, decode_mtp(8, 32 * 1024, state.range(0)), Layout::kEngineMxfp4);
}
BENCHMARK(BM_IndexerMxfp4_DecodeMtp8_32K)
    ->ArgName("next_n")
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// The NVFP4 form on the decode shapes.
void BM_IndexerNvfp4_Decode8x1_32K(benchmark::State& state) {
  run_case(state, decode_32k(), Layout::kEngineNvfp4);
}
BENCHMARK(BM_IndexerNvfp4_Decode8x1_32K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

void BM_IndexerNvfp4_Decode2x1_128K(benchmark::State& state) {
  run_case(state, decode2_128k(), Layout::kEngineNvfp4);
}
BENCHMARK(BM_IndexerNvfp4_Decode2x1_128K)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace
