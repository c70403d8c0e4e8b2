// GPU benchmarks of the CUDA backend (scripts/gpu_check.sh runs them on an H200): device-event
// timing (cuda::time_on_stream), the median of Google Benchmark's repetitions, and the GPU's
// own copy bandwidth measured in the same run as the ceiling of the memory-bound decode GEMV.
// Without a CUDA device every benchmark reports "no CUDA device" and skips.
//   BM_Cuda_CopyCeiling     device-to-device copy, GB/s counting bytes read + written
//   BM_Cuda_IndexerDecode   B = 1, 64K context, H = 64, D = 128, top_k = 2048 (issue: < 0.1 ms)
//   BM_Cuda_IndexerPrefill  4K new tokens, causal, same head shape (issue: < 0.7 ms)
//   BM_Cuda_QkvDecode       NVFP4 / MXFP8, M <= 16, K = 8192, N = 10240: weight GB/s (>= 70%)
//   BM_Cuda_QkvPrefill      NVFP4, M = 4096: TFLOP/s of the bf16 tensor-core GEMM
//   BM_Cuda_Quantize        NVFP4 quantiser, 4096 x 8192 floats: GB/s
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "quantkv/cuda.hpp"
#include "quantkv/info.hpp"
#include "quantkv/scale_layout.hpp"

namespace {

using namespace quantkv;

bool have_device(benchmark::State& state) {
  std::string why;
  if (cuda_device_count(&why) > 0) return true;
  state.SkipWithError(("no CUDA device: " + why).c_str());
  return false;
}

bool check(benchmark::State& state, const Status& st) {
  if (st.ok()) return true;
  state.SkipWithError(st.to_string().c_str());
  return false;
}

template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  cuda::DeviceBuffer b(v.size() * sizeof(T));
  if (b.ok()) (void)b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

std::vector<uint8_t> random_bytes(std::size_t n, uint32_t seed, uint8_t mask = 0xFF) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    b = uint8_t(rng() & mask);
    if ((b & 0x7F) == 0x7F) b = 0x38;  // no e4m3 NaN
  }
  return v;
}

// Runs `fn` `calls` times per timed batch; reports the per-call time as the iteration time.
template <typename Fn>
void time_batches(benchmark::State& state, int calls, Fn&& fn) {
  struct Arg { Fn* fn; };
  Arg arg{&fn};
  const cuda::TimedFn thunk = [](void* a) { return (*static_cast<Arg*>(a)->fn)(); };
  double ms = 0;
  if (!check(state, cuda::time_on_stream(thunk, &arg, 3, Context{}, &ms))) return;  // warm-up
  for (auto _ : state) {
    if (!check(state, cuda::time_on_stream(thunk, &arg, calls, Context{}, &ms))) return;
    state.SetIterationTime(ms * 1e-3);
  }
}

// ------------------------------------------------------------------ ceiling
double g_copy_gbs = 0;  // the last measured copy bandwidth (bytes read + written)

void BM_Cuda_CopyCeiling(benchmark::State& state) {
  if (!have_device(state)) return;
  const std::size_t bytes = std::size_t(1) << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  if (!check(state, a.status()) || !check(state, b.status())) return;
  if (!check(state, cuda::device_memset(a.get(), 0x5A, bytes))) return;
  time_batches(state, 5, [&] { return cuda::copy_device_to_device(b.get(), a.get(), bytes, Context{}); });
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * bytes));
  state.counters["GBps"] = benchmark::Counter(double(2 * bytes) * 1e-9 * double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_CopyCeiling)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

double copy_gbs() {
  if (g_copy_gbs > 0) return g_copy_gbs;
  const std::size_t bytes = std::size_t(1) << 30;
  cuda::DeviceBuffer a(bytes), b(bytes);
  if (!a.ok() || !b.ok()) return 0;
  struct Arg { void* dst; const void* src; std::size_t bytes; } arg{b.get(), a.get(), bytes};
  double ms = 0;
  const cuda::TimedFn fn = [](void* p) {
    auto* x = static_cast<Arg*>(p);
    return cuda::copy_device_to_device(x->dst, x->src, x->bytes, Context{});
  };
  if (!cuda::time_on_stream(fn, &arg, 2, Context{}, &ms).ok()) return 0;
  if (!cuda::time_on_stream(fn, &arg, 10, Context{}, &ms).ok()) return 0;
  g_copy_gbs = double(2 * bytes) / (ms * 1e-3) * 1e-9;
  return g_copy_gbs;
}

// ------------------------------------------------------------------ indexer
struct IndexerSetup {
  int64_t T, cache_len, H = 64, D = 128, top_k = 2048, page = 64;
  std::vector<uint32_t> offs, lengths, table;
  cuda::DeviceBuffer q, q_s, out, d_offs, blocks, scales, d_lengths, d_table;
  PagedKVCacheCollection kv;

  IndexerSetup(int64_t tokens, int64_t cached) : T(tokens), cache_len(cached) {
    const int64_t keys = cache_len + T, pages = (keys + page - 1) / page;
    offs = {0, uint32_t(T)};
    lengths = {uint32_t(cache_len)};
    table.resize(std::size_t(pages));
    for (int64_t p = 0; p < pages; ++p) table[p] = uint32_t((p * 7919) % pages);  // shuffled
    std::mt19937 rng(5);
    std::vector<float> qs(std::size_t(T * H)), sc(std::size_t(pages * page));
    for (auto& x : qs) x = std::normal_distribution<float>(0.2f, 1.0f)(rng);
    for (auto& x : sc) x = std::uniform_real_distribution<float>(0.01f, 1.0f)(rng);
    q = upload(random_bytes(std::size_t(T * H * D), 1));
    q_s = upload(qs);
    out = cuda::DeviceBuffer(std::size_t(T * top_k) * 4);
    d_offs = upload(offs);
    blocks = upload(random_bytes(std::size_t(pages * page * D), 2));
    scales = upload(sc);
    d_lengths = upload(lengths);
    d_table = upload(table);
    kv.blocks = blocks.get();
    kv.dtype = DType::kE4M3;
    kv.num_blocks = pages;
    kv.kv_dim = 1;
    kv.page_size = page;
    kv.num_heads = 1;
    kv.head_size = D;
    kv.scales = scales.as<float>();
    kv.scale_granularity = D;
    kv.cache_lengths = make_view<const uint32_t>(d_lengths.as<uint32_t>(), int64_t(1));
    kv.lookup_table = make_view<const uint32_t>(d_table.as<uint32_t>(), int64_t(1), pages);
  }
  Status run() const {
    const cuda::HostRagged host{make_view<const uint32_t>(offs.data(), int64_t(2)),
                                make_view<const uint32_t>(lengths.data(), int64_t(1)),
                                make_view<const uint32_t>(table.data(), int64_t(1), int64_t(table.size()))};
    return cuda::mla_indexer_ragged_float8_paged(
        make_view(out.as<int32_t>(), T, top_k), make_view<const float8_e4m3fn>(q.as<float8_e4m3fn>(), T, H, D),
        make_view<const float>(q_s.as<float>(), T, H), make_view<const uint32_t>(d_offs.as<uint32_t>(), int64_t(2)),
        kv, 0, MaskType::kCausal, host, Context{});
  }
};

void BM_Cuda_IndexerDecode(benchmark::State& state) {
  if (!have_device(state)) return;
  IndexerSetup s(1, 65536 - 1);
  time_batches(state, 50, [&] { return s.run(); });
  state.counters["keys"] = double(s.cache_len + 1);
}
BENCHMARK(BM_Cuda_IndexerDecode)->UseManualTime()->Iterations(20)->Repetitions(3)
    ->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

void BM_Cuda_IndexerPrefill(benchmark::State& state) {
  if (!have_device(state)) return;
  IndexerSetup s(4096, 0);
  time_batches(state, 10, [&] { return s.run(); });
  // Causal: sum over tokens of (i + 1) keys, 2 * H * D flops each.
  const double flops = double(s.T) * double(s.T + 1) / 2 * 2.0 * double(s.H * s.D);
  state.counters["TFLOPs"] = benchmark::Counter(flops * 1e-12 * double(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_IndexerPrefill)->UseManualTime()->Iterations(5)->Repetitions(3)
    ->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------------ fused QKV
struct QkvSetup {
  static constexpr int kRotate = 4;  // weight copies, so the weight never sits in L2
  BlockFormat f;
  int64_t M, K = 8192, q_dim = 8192, heads = 8, head = 128, page = 64;
  int64_t N = q_dim + 2 * heads * head;
  std::vector<uint32_t> offs, lengths, table;
  cuda::DeviceBuffer a, as, out, d_offs, blocks, d_lengths, d_table;
  cuda::DeviceBuffer w[kRotate], ws[kRotate];
  PagedKVCacheCollection kv;

  QkvSetup(BlockFormat format, int64_t rows) : f(format), M(rows) {
    const int64_t rb = row_bytes(f, K), kb = K / sf_vector_size(f);
    const uint8_t scale_mask = has_e8m0_scales(f) ? 0x07 : 0x3F;  // modest scales, no NaN
    a = upload(random_bytes(std::size_t(M * rb), 1));
    std::vector<uint8_t> asc = random_bytes(std::size_t(swizzled_scale_elements(M, kb)), 2, scale_mask);
    if (has_e8m0_scales(f)) for (auto& x : asc) x = uint8_t(x + 124);
    as = upload(asc);
    for (int i = 0; i < kRotate; ++i) {
      w[i] = upload(random_bytes(std::size_t(N * rb), 10 + i));
      std::vector<uint8_t> wsc = random_bytes(std::size_t(swizzled_scale_elements(N, kb)), 20 + i, scale_mask);
      if (has_e8m0_scales(f)) for (auto& x : wsc) x = uint8_t(x + 124);
      ws[i] = upload(wsc);
    }
    out = cuda::DeviceBuffer(std::size_t(M * q_dim) * 2);
    offs = {0, uint32_t(M)};
    lengths = {100};
    const int64_t pages = (100 + M + page - 1) / page;
    table.resize(std::size_t(pages));
    for (int64_t p = 0; p < pages; ++p) table[p] = uint32_t(pages - 1 - p);
    d_offs = upload(offs);
    d_lengths = upload(lengths);
    d_table = upload(table);
    blocks = cuda::DeviceBuffer(std::size_t(pages * 2 * page * heads * head) * 2);
    kv.blocks = blocks.get();
    kv.dtype = DType::kBF16;
    kv.num_blocks = pages;
    kv.kv_dim = 2;
    kv.page_size = page;
    kv.num_heads = heads;
    kv.head_size = head;
    kv.cache_lengths = make_view<const uint32_t>(d_lengths.as<uint32_t>(), int64_t(1));
    kv.lookup_table = make_view<const uint32_t>(d_table.as<uint32_t>(), int64_t(1), pages);
  }
  int64_t weight_bytes() const {
    return N * row_bytes(f, K) + swizzled_scale_elements(N, K / sf_vector_size(f));
  }
  Status run(int i) const {
    const int64_t rb = row_bytes(f, K), kb = K / sf_vector_size(f);
    const cuda::HostRagged host{make_view<const uint32_t>(offs.data(), int64_t(2)),
                                make_view<const uint32_t>(lengths.data(), int64_t(1)),
                                make_view<const uint32_t>(table.data(), int64_t(1), int64_t(table.size()))};
    return cuda::generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        make_view<const uint8_t>(a.as<uint8_t>(), M, rb), make_view<const uint32_t>(d_offs.as<uint32_t>(), int64_t(2)),
        make_view<const uint8_t>(w[i].as<uint8_t>(), N, rb),
        make_view<const uint8_t, 5>(as.as<uint8_t>(), swizzled_scale_shape(M, kb)),
        make_view<const uint8_t, 5>(ws[i].as<uint8_t>(), swizzled_scale_shape(N, kb)), 1.0f, kv, 0,
        make_view(out.as<bfloat16>(), M, q_dim), f, host, Context{});
  }
};

void BM_Cuda_QkvDecode(benchmark::State& state) {
  if (!have_device(state)) return;
  const double ceiling = copy_gbs();
  QkvSetup s(BlockFormat(state.range(0)), state.range(1));
  int call = 0;
  time_batches(state, 40, [&] { return s.run(call++ % QkvSetup::kRotate); });
  const double gbs = double(s.weight_bytes()) * 1e-9 * double(state.iterations());
  state.counters["weight_GBps"] = benchmark::Counter(gbs, benchmark::Counter::kIsRate);
  state.counters["copy_GBps"] = ceiling;
  state.SetLabel(block_format_name(s.f));
}
BENCHMARK(BM_Cuda_QkvDecode)->UseManualTime()->Iterations(20)->Repetitions(3)->ReportAggregatesOnly(true)
    ->Args({int64_t(BlockFormat::kNVFP4), 1})->Args({int64_t(BlockFormat::kNVFP4), 16})
    ->Args({int64_t(BlockFormat::kMXFP4), 16})->Args({int64_t(BlockFormat::kMXFP8), 16})
    ->Unit(benchmark::kMicrosecond);

void BM_Cuda_QkvPrefill(benchmark::State& state) {
  if (!have_device(state)) return;
  QkvSetup s(BlockFormat::kNVFP4, 4096);
  time_batches(state, 5, [&] { return s.run(0); });
  state.counters["TFLOPs"] = benchmark::Counter(2.0 * double(s.M * s.N * s.K) * 1e-12 * double(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_QkvPrefill)->UseManualTime()->Iterations(5)->Repetitions(3)->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------------ quantiser
void BM_Cuda_Quantize(benchmark::State& state) {
  if (!have_device(state)) return;
  const int64_t M = 4096, K = 8192;
  std::vector<float> x(std::size_t(M * K));
  std::mt19937 rng(3);
  for (auto& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  cuda::DeviceBuffer dx = upload(x), data(std::size_t(M * K / 2)),
                     scales(std::size_t(swizzled_scale_elements(M, K / 16)));
  time_batches(state, 10, [&] {
    return cuda::quantize_dynamic_block_scaled(make_view<const float>(dx.as<float>(), M, K), 448.0f * 6.0f / 4.0f,
                                               BlockFormat::kNVFP4, make_view(data.as<uint8_t>(), M, K / 2),
                                               make_view<uint8_t, 5>(scales.as<uint8_t>(), swizzled_scale_shape(M, K / 16)),
                                               Context{});
  });
  const double bytes = double(M * K) * 4 + double(M * K / 2) + double(M * K / 16);
  state.counters["GBps"] = benchmark::Counter(bytes * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_Quantize)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
