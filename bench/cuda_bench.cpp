// GPU benchmarks of the CUDA backend (scripts/gpu_check.sh runs them on an H200): device-event
// timing (cuda::time_on_stream), the median of Google Benchmark's repetitions, and the GPU's
// own copy bandwidth measured in the same run as the ceiling of the memory-bound decode GEMV.
// Without a CUDA device every benchmark reports "no CUDA device" and skips. Before timing,
// each benchmark checks its result once (per benchmark and arguments, not per repetition)
// against the CPU backend on the same inputs, and reports "result check failed: ..." as its
// error otherwise: a fast wrong kernel must not produce a number.
//   BM_Cuda_CopyCeiling     device-to-device copy, GB/s counting bytes read + written
//   BM_Cuda_IndexerDecode   B = 1, 64K context, H = 64, D = 128, top_k = 2048 (issue: < 0.1 ms)
//   BM_Cuda_IndexerPrefill  4K new tokens, causal, same head shape (issue: < 0.7 ms)
//   BM_Cuda_QkvDecode       NVFP4 / MXFP8, M <= 16, K = 8192, N = 10240: weight GB/s (>= 70%)
//   BM_Cuda_QkvPrefill      NVFP4, M = 4096: TFLOP/s of the bf16 tensor-core GEMM
//   BM_Cuda_Quantize        NVFP4 quantiser, 4096 x 8192 floats: GB/s
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "quantkv/cuda.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/info.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
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

// Runs `check` (an empty string when the result is right, else what is wrong) the first time
// `key` is seen, and stops the benchmark with its message when it failed, every repetition.
bool checked_once(benchmark::State& state, const std::string& key,
                  const std::function<std::string()>& check) {
  static std::map<std::string, std::string> results;
  auto it = results.find(key);
  if (it == results.end()) it = results.emplace(key, check()).first;
  if (it->second.empty()) return true;
  state.SkipWithError(("result check failed: " + it->second).c_str());
  return false;
}

template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& b, std::size_t count, Status* st) {
  std::vector<T> v(count);
  *st = b.download(v.data(), count * sizeof(T));
  return v;
}

// ||got - want|| / ||want|| over bf16 values.
double relative_error(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    diff += (g - w) * (g - w);
    norm += w * w;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
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
  struct Arg {
    Fn* fn;
  };
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
  const bool right = checked_once(state, "copy", [&]() -> std::string {
    Status st = cuda::copy_device_to_device(b.get(), a.get(), bytes, Context{});
    if (st.ok()) st = cuda::synchronize(Context{});
    std::vector<uint8_t> head(4096), tail(4096);
    if (st.ok()) st = cuda::copy_to_host(head.data(), b.get(), head.size());
    if (st.ok())
      st = cuda::copy_to_host(tail.data(), b.as<uint8_t>() + bytes - tail.size(), tail.size());
    if (!st.ok()) return st.to_string();
    const auto not_copied = [](uint8_t x) { return x != 0x5A; };
    return std::any_of(head.begin(), head.end(), not_copied) ||
                   std::any_of(tail.begin(), tail.end(), not_copied)
               ? "the copy's first or last 4 KB differ from the source"
               : "";
  });
  if (!right) return;
  time_batches(state, 5,
               [&] { return cuda::copy_device_to_device(b.get(), a.get(), bytes, Context{}); });
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
  struct Arg {
    void* dst;
    const void* src;
    std::size_t bytes;
  } arg{b.get(), a.get(), bytes};
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
  std::vector<uint8_t> h_q, h_blocks;  // host copies for the result check
  std::vector<float> h_qs, h_scales;
  cuda::DeviceBuffer q, q_s, out, d_offs, blocks, scales, d_lengths, d_table;
  PagedKVCacheCollection kv;

  IndexerSetup(int64_t tokens, int64_t cached) : T(tokens), cache_len(cached) {
    const int64_t keys = cache_len + T, pages = (keys + page - 1) / page;
    offs = {0, uint32_t(T)};
    lengths = {uint32_t(cache_len)};
    table.resize(std::size_t(pages));
    for (int64_t p = 0; p < pages; ++p) table[p] = uint32_t((p * 7919) % pages);  // shuffled
    std::mt19937 rng(5);
    h_qs.resize(std::size_t(T * H));
    h_scales.resize(std::size_t(pages * page));
    for (auto& x : h_qs) x = std::normal_distribution<float>(0.2f, 1.0f)(rng);
    for (auto& x : h_scales) x = std::uniform_real_distribution<float>(0.01f, 1.0f)(rng);
    h_q = random_bytes(std::size_t(T * H * D), 1);
    h_blocks = random_bytes(std::size_t(pages * page * D), 2);
    q = upload(h_q);
    q_s = upload(h_qs);
    out = cuda::DeviceBuffer(std::size_t(T * top_k) * 4);
    d_offs = upload(offs);
    blocks = upload(h_blocks);
    scales = upload(h_scales);
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
    const cuda::HostRagged host{
        make_view<const uint32_t>(offs.data(), int64_t(2)),
        make_view<const uint32_t>(lengths.data(), int64_t(1)),
        make_view<const uint32_t>(table.data(), int64_t(1), int64_t(table.size()))};
    return cuda::mla_indexer_ragged_float8_paged(
        make_view(out.as<int32_t>(), T, top_k),
        make_view<const float8_e4m3fn>(q.as<float8_e4m3fn>(), T, H, D),
        make_view<const float>(q_s.as<float>(), T, H),
        make_view<const uint32_t>(d_offs.as<uint32_t>(), int64_t(2)), kv, 0, MaskType::kCausal,
        host, Context{});
  }
  // The GPU's indices of the last `rows` tokens against the CPU backend's (which sees those
  // tokens alone, after a cache of cache_len + T - rows keys: the same causal bounds). Random
  // scores make exact ties unlikely but leave near-ties that the two summation orders may
  // rank apart (contract §3's tolerance), so each row must share >= 99% of its indices.
  std::string check(int64_t rows) const {
    Status st = run();
    if (st.ok()) st = cuda::synchronize(Context{});
    const std::vector<int32_t> gpu =
        st.ok() ? download<int32_t>(out, std::size_t(T * top_k), &st) : std::vector<int32_t>();
    if (!st.ok()) return st.to_string();
    const int64_t t0 = T - rows;
    const std::vector<uint32_t> sub_offs = {0, uint32_t(rows)},
                                sub_len = {uint32_t(cache_len + t0)};
    PagedKVCacheCollection host_kv = kv;
    host_kv.blocks = const_cast<uint8_t*>(h_blocks.data());
    host_kv.scales = const_cast<float*>(h_scales.data());
    host_kv.cache_lengths = make_view<const uint32_t>(sub_len.data(), int64_t(1));
    host_kv.lookup_table =
        make_view<const uint32_t>(table.data(), int64_t(1), int64_t(table.size()));
    std::vector<int32_t> cpu(std::size_t(rows * top_k), -7);
    st = mla_indexer_ragged_float8_paged(
        make_view(cpu.data(), rows, top_k),
        make_view<const float8_e4m3fn>(
            reinterpret_cast<const float8_e4m3fn*>(h_q.data()) + t0 * H * D, rows, H, D),
        make_view<const float>(h_qs.data() + t0 * H, rows, H),
        make_view<const uint32_t>(sub_offs.data(), int64_t(2)), host_kv, 0, MaskType::kCausal,
        Context{});
    if (!st.ok()) return "CPU backend: " + st.to_string();
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* g = gpu.data() + (t0 + r) * top_k;
      const int32_t* c = cpu.data() + r * top_k;
      const int64_t bound = cache_len + t0 + r + 1, n = std::min(top_k, bound);  // then the -1 tail
      const std::set<int32_t> gs(g, g + n), cs(c, c + n);
      int64_t shared = 0;
      for (int32_t v : gs) shared += int64_t(cs.count(v));
      const bool in_range = std::all_of(g, g + n, [&](int32_t v) { return v >= 0 && v < bound; }) &&
                            std::all_of(g + n, g + top_k, [](int32_t v) { return v == -1; });
      if (!in_range || int64_t(gs.size()) != n || shared * 100 < n * 99) {
        return "token " + std::to_string(t0 + r) + ": " + std::to_string(shared) + " of " +
               std::to_string(n) + " indices shared with the CPU backend" +
               (in_range ? "" : ", an index out of range or a bad tail") +
               (int64_t(gs.size()) == n ? "" : ", duplicate indices");
      }
    }
    return "";
  }
};

void BM_Cuda_IndexerDecode(benchmark::State& state) {
  if (!have_device(state)) return;
  IndexerSetup s(1, 65536 - 1);
  if (!checked_once(state, "indexer decode", [&] { return s.check(1); })) return;
  time_batches(state, 50, [&] { return s.run(); });
  state.counters["keys"] = double(s.cache_len + 1);
}
BENCHMARK(BM_Cuda_IndexerDecode)
    ->UseManualTime()
    ->Iterations(20)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

void BM_Cuda_IndexerPrefill(benchmark::State& state) {
  if (!have_device(state)) return;
  IndexerSetup s(4096, 0);
  if (!checked_once(state, "indexer prefill", [&] { return s.check(8); })) return;
  time_batches(state, 10, [&] { return s.run(); });
  // Causal: sum over tokens of (i + 1) keys, 2 * H * D flops each.
  const double flops = double(s.T) * double(s.T + 1) / 2 * 2.0 * double(s.H * s.D);
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * 1e-12 * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_IndexerPrefill)
    ->UseManualTime()
    ->Iterations(5)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------------ fused QKV
struct QkvSetup {
  static constexpr int kRotate = 4;  // weight copies, so the weight never sits in L2
  BlockFormat f;
  int64_t M, K = 8192, q_dim = 8192, heads = 8, head = 128, page = 64;
  int64_t N = q_dim + 2 * heads * head;
  std::vector<uint32_t> offs, lengths, table;
  std::vector<uint8_t> h_a, h_as, h_w0, h_ws0;  // host copies for the result check
  cuda::DeviceBuffer a, as, out, d_offs, blocks, d_lengths, d_table;
  cuda::DeviceBuffer w[kRotate], ws[kRotate];
  PagedKVCacheCollection kv;

  QkvSetup(BlockFormat format, int64_t rows) : f(format), M(rows) {
    const int64_t rb = row_bytes(f, K), kb = K / sf_vector_size(f);
    const uint8_t scale_mask = has_e8m0_scales(f) ? 0x07 : 0x3F;  // modest scales, no NaN
    h_a = random_bytes(std::size_t(M * rb), 1);
    a = upload(h_a);
    h_as = random_bytes(std::size_t(swizzled_scale_elements(M, kb)), 2, scale_mask);
    if (has_e8m0_scales(f))
      for (auto& x : h_as) x = uint8_t(x + 124);
    as = upload(h_as);
    for (int i = 0; i < kRotate; ++i) {
      std::vector<uint8_t> wd = random_bytes(std::size_t(N * rb), 10 + i);
      std::vector<uint8_t> wsc =
          random_bytes(std::size_t(swizzled_scale_elements(N, kb)), 20 + i, scale_mask);
      if (has_e8m0_scales(f))
        for (auto& x : wsc) x = uint8_t(x + 124);
      w[i] = upload(wd);
      ws[i] = upload(wsc);
      if (i == 0) h_w0 = std::move(wd), h_ws0 = std::move(wsc);
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
    const cuda::HostRagged host{
        make_view<const uint32_t>(offs.data(), int64_t(2)),
        make_view<const uint32_t>(lengths.data(), int64_t(1)),
        make_view<const uint32_t>(table.data(), int64_t(1), int64_t(table.size()))};
    return cuda::generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        make_view<const uint8_t>(a.as<uint8_t>(), M, rb),
        make_view<const uint32_t>(d_offs.as<uint32_t>(), int64_t(2)),
        make_view<const uint8_t>(w[i].as<uint8_t>(), N, rb),
        make_view<const uint8_t, 5>(as.as<uint8_t>(), swizzled_scale_shape(M, kb)),
        make_view<const uint8_t, 5>(ws[i].as<uint8_t>(), swizzled_scale_shape(N, kb)), 1.0f, kv, 0,
        make_view(out.as<bfloat16>(), M, q_dim), f, host, Context{});
  }
  // Weight copy 0 on the GPU against the CPU backend for the first `rows` rows (<= 128: their
  // scales are the first 128-row block of the 5-D layout, the same bytes for any M): Q and the
  // K/V those rows store, ||gpu - cpu|| / ||cpu|| <= 2^-8 in bf16 (the two fp32 summation
  // orders differ by far less; an indexing or decoding fault gives O(1)).
  std::string check(int64_t rows) const {
    Status st = run(0);
    if (st.ok()) st = cuda::synchronize(Context{});
    const std::vector<uint16_t> gpu_q =
        st.ok() ? download<uint16_t>(out, std::size_t(rows * q_dim), &st) : std::vector<uint16_t>();
    const std::size_t cache_elems = blocks.bytes() / 2;
    const std::vector<uint16_t> gpu_kv =
        st.ok() ? download<uint16_t>(blocks, cache_elems, &st) : std::vector<uint16_t>();
    if (!st.ok()) return st.to_string();
    const int64_t rb = row_bytes(f, K), kb = K / sf_vector_size(f);
    const std::vector<uint32_t> sub_offs = {0, uint32_t(rows)};
    std::vector<uint16_t> cpu_q(std::size_t(rows * q_dim)), cpu_kv(cache_elems);
    PagedKVCacheCollection host_kv = kv;
    host_kv.blocks = cpu_kv.data();
    host_kv.cache_lengths = make_view<const uint32_t>(lengths.data(), int64_t(1));
    host_kv.lookup_table =
        make_view<const uint32_t>(table.data(), int64_t(1), int64_t(table.size()));
    st = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        make_view<const uint8_t>(h_a.data(), rows, rb),
        make_view<const uint32_t>(sub_offs.data(), int64_t(2)),
        make_view<const uint8_t>(h_w0.data(), N, rb),
        make_view<const uint8_t, 5>(h_as.data(), swizzled_scale_shape(rows, kb)),
        make_view<const uint8_t, 5>(h_ws0.data(), swizzled_scale_shape(N, kb)), 1.0f, host_kv, 0,
        make_view(reinterpret_cast<bfloat16*>(cpu_q.data()), rows, q_dim), f, Context{});
    if (!st.ok()) return "CPU backend: " + st.to_string();
    std::vector<uint16_t> got_kv, want_kv;  // the K/V of the checked rows only
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t pos = lengths[0] + i;
      for (int64_t e = 0; e < 2 * heads * head; ++e) {
        const int64_t off = host_kv.element_offset(host_kv.page_of(0, pos), e / (heads * head), 0,
                                                   pos % page, (e / head) % heads, e % head);
        got_kv.push_back(gpu_kv[std::size_t(off)]);
        want_kv.push_back(cpu_kv[std::size_t(off)]);
      }
    }
    const double eq = relative_error(gpu_q, cpu_q), ekv = relative_error(got_kv, want_kv);
    if (!(eq <= 0x1p-8) || !(ekv <= 0x1p-8)) {
      return "relative error against the CPU backend: Q " + std::to_string(eq) + ", K/V " +
             std::to_string(ekv);
    }
    return "";
  }
};

void BM_Cuda_QkvDecode(benchmark::State& state) {
  if (!have_device(state)) return;
  const double ceiling = copy_gbs();
  QkvSetup s(BlockFormat(state.range(0)), state.range(1));
  const std::string key =
      "qkv decode " + std::to_string(state.range(0)) + " " + std::to_string(state.range(1));
  if (!checked_once(state, key, [&] { return s.check(s.M); })) return;
  int call = 0;
  time_batches(state, 40, [&] { return s.run(call++ % QkvSetup::kRotate); });
  const double gbs = double(s.weight_bytes()) * 1e-9 * double(state.iterations());
  state.counters["weight_GBps"] = benchmark::Counter(gbs, benchmark::Counter::kIsRate);
  state.counters["copy_GBps"] = ceiling;
  state.SetLabel(block_format_name(s.f));
}
BENCHMARK(BM_Cuda_QkvDecode)
    ->UseManualTime()
    ->Iterations(20)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Args({int64_t(BlockFormat::kNVFP4), 1})
    ->Args({int64_t(BlockFormat::kNVFP4), 16})
    ->Args({int64_t(BlockFormat::kMXFP4), 16})
    ->Args({int64_t(BlockFormat::kMXFP8), 16})
    ->Unit(benchmark::kMicrosecond);

void BM_Cuda_QkvPrefill(benchmark::State& state) {
  if (!have_device(state)) return;
  QkvSetup s(BlockFormat::kNVFP4, 4096);
  if (!checked_once(state, "qkv prefill", [&] { return s.check(32); })) return;
  time_batches(state, 5, [&] { return s.run(0); });
  state.counters["TFLOPs"] =
      benchmark::Counter(2.0 * double(s.M * s.N * s.K) * 1e-12 * double(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_QkvPrefill)
    ->UseManualTime()
    ->Iterations(5)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

// ------------------------------------------------------------------ quantiser
void BM_Cuda_Quantize(benchmark::State& state) {
  if (!have_device(state)) return;
  const int64_t M = 4096, K = 8192;
  std::vector<float> x(std::size_t(M * K));
  std::mt19937 rng(3);
  for (auto& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  const std::size_t n_scales = std::size_t(swizzled_scale_elements(M, K / 16));
  cuda::DeviceBuffer dx = upload(x), data(std::size_t(M * K / 2)), scales(n_scales);
  const float g = 448.0f * 6.0f / 4.0f;
  const auto run = [&] {
    return cuda::quantize_dynamic_block_scaled(
        make_view<const float>(dx.as<float>(), M, K), g, BlockFormat::kNVFP4,
        make_view(data.as<uint8_t>(), M, K / 2),
        make_view<uint8_t, 5>(scales.as<uint8_t>(), swizzled_scale_shape(M, K / 16)), Context{});
  };
  // Bit-exact with the CPU quantiser (the same recipe): every data and scale byte.
  const bool right = checked_once(state, "quantize", [&]() -> std::string {
    Status st = run();
    if (st.ok()) st = cuda::synchronize(Context{});
    const std::vector<uint8_t> gd =
        st.ok() ? download<uint8_t>(data, std::size_t(M * K / 2), &st) : std::vector<uint8_t>();
    const std::vector<uint8_t> gs =
        st.ok() ? download<uint8_t>(scales, n_scales, &st) : std::vector<uint8_t>();
    if (!st.ok()) return st.to_string();
    std::vector<uint8_t> cd(gd.size()), cs(n_scales);
    st = quantize_dynamic_block_scaled(
        make_view<const float>(x.data(), M, K), g, BlockFormat::kNVFP4,
        make_view(cd.data(), M, K / 2),
        make_view<uint8_t, 5>(cs.data(), swizzled_scale_shape(M, K / 16)), Context{});
    if (!st.ok()) return "CPU backend: " + st.to_string();
    return gd == cd && gs == cs ? "" : "bytes differ from the CPU quantiser";
  });
  if (!right) return;
  time_batches(state, 10, [&] { return run(); });
  const double bytes = double(M * K) * 4 + double(M * K / 2) + double(M * K / 16);
  state.counters["GBps"] =
      benchmark::Counter(bytes * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Cuda_Quantize)->UseManualTime()->Iterations(10)->Unit(benchmark::kMicrosecond);

}  // namespace
