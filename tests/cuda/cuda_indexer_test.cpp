// The CUDA indexer (contract §3) against the CPU implementation, and the CUDA indexer K store
// (contract §5) against the CPU K store. Needs a CUDA device; skips visibly ("no CUDA device")
// without one.
//  - exact mode: small-integer q and K, integer head weights, power-of-two key scales: every
//    score is exact in fp32 whatever the summation order (tensor cores included), so the GPU's
//    indices must equal the CPU's, ties (there are many) and NaN keys included;
//  - random mode: against the double-precision reference with contract §3's tolerance rule. The
//    tolerance is wider than the CPU tests' because FP8 tensor cores do not accumulate with
//    IEEE fp32 rounding (DeepSeek-V3 reports about 14 significant bits inside the MMA).
// Structure (distinct in-range indices, the -1 tail) is always checked, and the output is
// poisoned before every call. A tiny scores budget forces chunking and must not change results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "cuda_test_util.hpp"
#include "quantkv/cuda.hpp"
#include "quantkv/indexer.hpp"
#include "reference/indexer_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::DeviceArray;
using testing::DeviceCache;
using testing::TestRng;

enum class Fill { kExact, kRandom, kExactWithNaN };

struct Shape {
  int64_t H, D, top_k, page_size;
  std::vector<int64_t> seq_lens, cache_lens;
  MaskType mask;
};

struct Problem {
  Shape s;
  int64_t T = 0;
  PagedKVCache cache;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  std::vector<uint32_t> offs;
  uint32_t layer = 1;

  TensorView<const float8_e4m3fn, 3> qv() const {
    return make_view<const float8_e4m3fn>(q.data(), T, s.H, s.D);
  }
  TensorView<const float, 2> qsv() const { return make_view<const float>(q_s.data(), T, s.H); }
  TensorView<const uint32_t, 1> offv() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
};

uint8_t code(TestRng& rng, Fill fill) {
  if (fill == Fill::kRandom) return float_to_e4m3(rng.normal(0.0f, 24.0f));
  if (fill == Fill::kExactWithNaN && rng.uniform_int(0, 999) == 0) return 0x7F;
  return float_to_e4m3(float(rng.uniform_int(-2, 2)));
}

Problem make_problem(const Shape& s, Fill fill, TestRng& rng) {
  Problem p;
  p.s = s;
  const int64_t B = int64_t(s.seq_lens.size());
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kE4M3;
  cfg.kv_dim = 1;
  cfg.num_layers = 2;
  cfg.page_size = s.page_size;
  cfg.num_heads = 1;
  cfg.head_size = s.D;
  cfg.scale_granularity = s.D;
  cfg.batch_size = B;
  int64_t pages = 3, max_pages = 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t need = (s.seq_lens[b] + s.cache_lens[b] + s.page_size - 1) / s.page_size;
    pages += need;
    max_pages = std::max(max_pages, need + 1);  // a sentinel entry past the end
  }
  cfg.num_blocks = pages;
  cfg.max_pages_per_seq = max_pages;
  EXPECT_TRUE(PagedKVCache::create(cfg, rng.engine()(), &p.cache).ok());
  p.offs.push_back(0);
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_TRUE(p.cache.reserve(b, s.seq_lens[b] + s.cache_lens[b]).ok());
    EXPECT_TRUE(p.cache.set_cache_length(b, s.cache_lens[b]).ok());
    p.offs.push_back(p.offs.back() + uint32_t(s.seq_lens[b]));
  }
  p.T = p.offs.back();
  for (uint8_t& byte : p.cache.raw_blocks()) byte = code(rng, fill);
  for (float& sc : p.cache.raw_scales()) {
    sc = fill == Fill::kRandom ? rng.uniform_float(0.01f, 2.0f)
                               : std::ldexp(1.0f, int(rng.uniform_int(-1, 1)));
  }
  p.q.resize(std::size_t(p.T * s.H * s.D));
  for (auto& c : p.q)
    c.bits = fill == Fill::kRandom ? code(rng, fill) : float_to_e4m3(float(rng.uniform_int(-2, 2)));
  p.q_s.resize(std::size_t(p.T * s.H));
  for (float& w : p.q_s)
    w = fill == Fill::kRandom ? rng.normal(0.2f, 1.0f) : float(rng.uniform_int(-2, 3));
  return p;
}

int64_t key_bound(const Problem& p, int64_t t) {
  int64_t b = 0;
  while (int64_t(p.offs[b + 1]) <= t) ++b;
  const int64_t cache_len = p.s.cache_lens[b];
  return p.s.mask == MaskType::kCausal ? cache_len + (t - p.offs[b]) + 1
                                       : cache_len + p.s.seq_lens[b];
}

std::vector<int32_t> run_cpu(Problem& p) {
  std::vector<int32_t> out(std::size_t(p.T * p.s.top_k));
  testing::poison(out);
  const Status st =
      mla_indexer_ragged_float8_paged(make_view(out.data(), p.T, p.s.top_k), p.qv(), p.qsv(),
                                      p.offv(), p.cache.view(), p.layer, p.s.mask, Context{});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// A problem's inputs on the device, uploaded once; run() may be called repeatedly (and from
// several host threads on different problems).
class DeviceProblem {
 public:
  explicit DeviceProblem(Problem& p)
      : p_(p), d_q_(p.q), d_qs_(p.q_s), d_offs_(p.offs), d_cache_(p.cache) {}

  // One call on ctx.cuda_stream with the given scores budget (poisoned output, synchronised).
  std::vector<int32_t> run(std::size_t budget, Status* status,
                           const Context& base = Context{}) const {
    std::vector<int32_t> out(std::size_t(p_.T * p_.s.top_k));
    testing::poison(out);
    DeviceArray<int32_t> d_out(out);
    Context ctx = base;
    ctx.scores_budget_bytes = budget;
    *status = cuda::mla_indexer_ragged_float8_paged(
        make_view(d_out.get(), p_.T, p_.s.top_k),
        make_view<const float8_e4m3fn>(d_q_.get(), p_.T, p_.s.H, p_.s.D),
        make_view<const float>(d_qs_.get(), p_.T, p_.s.H),
        make_view<const uint32_t>(d_offs_.get(), int64_t(p_.offs.size())), d_cache_.view(),
        p_.layer, p_.s.mask, d_cache_.host_ragged(p_.offv()), ctx);
    if (status->ok()) *status = cuda::synchronize(ctx);
    return d_out.download();
  }

 private:
  const Problem& p_;
  DeviceArray<float8_e4m3fn> d_q_;
  DeviceArray<float> d_qs_;
  DeviceArray<uint32_t> d_offs_;
  DeviceCache d_cache_;
};

std::vector<int32_t> run_gpu(Problem& p, std::size_t budget, Status* status,
                             const Context& ctx = Context{}) {
  return DeviceProblem(p).run(budget, status, ctx);
}

void check_structure(const Problem& p, const std::vector<int32_t>& out) {
  const int64_t K = p.s.top_k;
  for (int64_t t = 0; t < p.T; ++t) {
    const int64_t bound = key_bound(p, t), n = std::min(K, bound);
    std::set<int32_t> seen;
    for (int64_t i = 0; i < K; ++i) {
      const int32_t v = out[t * K + i];
      if (i < n) {
        ASSERT_GE(v, 0) << "row " << t << " slot " << i;
        ASSERT_LT(v, bound) << "masked or out-of-range index, row " << t << " slot " << i;
        ASSERT_TRUE(seen.insert(v).second) << "duplicate " << v << " in row " << t;
      } else {
        ASSERT_EQ(v, -1) << "row " << t << " slot " << i << " of the -1 tail";
      }
    }
  }
}

// contract §3's rule against the double reference, eps = 2^-10 * the row's error scale (see top).
void check_within_tolerance(Problem& p, const std::vector<int32_t>& out) {
  const auto rows =
      reference::indexer_scores_reference(p.qv(), p.qsv(), p.offv(), p.cache.view(), p.layer,
                                          p.s.mask, reference::ScorePrecision::kDouble);
  const int64_t K = p.s.top_k;
  for (int64_t t = 0; t < p.T; ++t) {
    const std::vector<double>& r = rows[t].scores;
    const double eps = 0x1p-10 * rows[t].magnitude;
    const int64_t n = std::min<int64_t>(K, int64_t(r.size()));
    std::vector<double> sorted = r;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    const double tau = sorted[n - 1];
    const std::set<int32_t> chosen(out.begin() + t * K, out.begin() + t * K + n);
    for (int64_t j = 0; j < int64_t(r.size()); ++j) {
      if (r[j] > tau + eps) {
        ASSERT_TRUE(chosen.count(int32_t(j))) << "row " << t << " misses key " << j;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_GE(r[out[t * K + i]], tau - eps) << "row " << t << " slot " << i;
      if (i > 0) {
        ASSERT_GE(r[out[t * K + i - 1]], r[out[t * K + i]] - eps)
            << "row " << t << " order at " << i;
      }
    }
  }
}

// `ctx` carries the stream (the scores budget is set here).
void check_case(const Shape& s, Fill fill, const Context& ctx = Context{}) {
  TestRng rng;
  Problem p = make_problem(s, fill, rng);
  Status st;
  const std::vector<int32_t> gpu = run_gpu(p, std::size_t(512) << 20, &st, ctx);
  ASSERT_TRUE(st.ok()) << st.to_string();
  check_structure(p, gpu);
  if (fill == Fill::kRandom) {
    check_within_tolerance(p, gpu);
  } else {
    EXPECT_EQ(gpu, run_cpu(p)) << "exact inputs: the GPU indices must equal the CPU's";
  }
  // A budget of ~3 score rows: many chunks, same result.
  const int64_t max_keys = *std::max_element(s.cache_lens.begin(), s.cache_lens.end()) +
                           *std::max_element(s.seq_lens.begin(), s.seq_lens.end());
  const std::vector<int32_t> chunked = run_gpu(p, std::size_t(3 * (max_keys + 4) * 4), &st, ctx);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(chunked, gpu) << "chunking over tokens changed the result";
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> v = {
      // mixed prefill/decode, empty sequences, partial pages, top_k above the key count
      {64, 128, 16, 16, {6, 1, 0, 4, 1}, {128, 64, 7, 200, 50}, MaskType::kCausal},
      {64, 128, 16, 16, {6, 1, 0, 4, 1}, {128, 64, 7, 200, 50}, MaskType::kNull},
      {1, 32, 1, 1, {3, 2}, {5, 0}, MaskType::kCausal},
      {16, 64, 7, 3, {9, 0, 5}, {0, 4, 17}, MaskType::kCausal},
      {80, 48, 300, 64, {130, 3}, {140, 255}, MaskType::kCausal},    // H > 64: two head passes
      {64, 128, 2048, 64, {1, 1}, {3000, 2600}, MaskType::kCausal},  // decode, top_k < keys
      {64, 128, 128, 16, {300}, {0}, MaskType::kCausal},             // prefill, > 128-key tiles
      {32, 256, 64, 32, {20, 17}, {129, 0}, MaskType::kNull},
  };
  return v;
}

Shape decode_batch_of_80() {  // more token groups than the kernel parameters hold (64)
  Shape s{16, 32, 24, 16, {}, {}, MaskType::kCausal};
  for (int b = 0; b < 80; ++b) {
    s.seq_lens.push_back(1 + b % 3);
    s.cache_lens.push_back(5 + (b * 7) % 40);
  }
  return s;
}

TEST(CudaIndexer, ExactInputsGiveTheCpuIndices) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  for (const Shape& s : shapes()) {
    SCOPED_TRACE("H=" + std::to_string(s.H) + " D=" + std::to_string(s.D) +
                 " top_k=" + std::to_string(s.top_k));
    check_case(s, Fill::kExact);
  }
}

TEST(CudaIndexer, NaNKeysRankLastAsOnTheCpu) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  for (const Shape& s : shapes()) check_case(s, Fill::kExactWithNaN);
}

TEST(CudaIndexer, RandomInputsMeetTheToleranceRule) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  for (const Shape& s : shapes()) check_case(s, Fill::kRandom);
}

TEST(CudaIndexer, LongDecodeContextSplitsKeysAcrossBlocks) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  const Shape s{64, 128, 2048, 64, {1}, {40000}, MaskType::kCausal};
  check_case(s, Fill::kExact);
  check_case(s, Fill::kRandom);
}

TEST(CudaIndexer, LargeDecodeBatchUploadsItsTokenGroups) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  check_case(decode_batch_of_80(), Fill::kExact);
}

TEST(CudaIndexer, AllEqualScoresComeBackInIndexOrder) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  Problem p = make_problem({8, 32, 50, 16, {2, 1}, {90, 30}, MaskType::kCausal}, Fill::kExact, rng);
  std::fill(p.cache.raw_blocks().begin(), p.cache.raw_blocks().end(), float_to_e4m3(1.0f));
  std::fill(p.cache.raw_scales().begin(), p.cache.raw_scales().end(), 1.0f);
  Status st;
  const std::vector<int32_t> gpu = run_gpu(p, std::size_t(512) << 20, &st);
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (int64_t t = 0; t < p.T; ++t) {
    const int64_t n = std::min<int64_t>(50, key_bound(p, t));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gpu[t * 50 + i], int32_t(i)) << "row " << t;
  }
  EXPECT_EQ(gpu, run_cpu(p));
}

TEST(CudaIndexer, BadInputIsRejectedBeforeAnythingIsWritten) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  TestRng rng;
  Problem p = make_problem({4, 32, 8, 4, {3, 2}, {5, 1}, MaskType::kCausal}, Fill::kExact, rng);
  std::vector<int32_t> poisoned(std::size_t(p.T * 8));
  testing::poison(poisoned);
  DeviceArray<int32_t> d_out(poisoned);
  DeviceArray<float8_e4m3fn> d_q(p.q);
  DeviceArray<float> d_qs(p.q_s);
  DeviceArray<uint32_t> d_offs(p.offs);
  DeviceCache d_cache(p.cache);
  const auto call = [&](TensorView<const uint32_t, 1> host_offs, const cuda::HostRagged& host) {
    return cuda::mla_indexer_ragged_float8_paged(
        make_view(d_out.get(), p.T, 8), make_view<const float8_e4m3fn>(d_q.get(), p.T, 4, 32),
        make_view<const float>(d_qs.get(), p.T, 4), make_view<const uint32_t>(d_offs.get(), 3),
        d_cache.view(), p.layer, MaskType::kCausal, host, Context{});
  };
  // Offsets not ending at T.
  std::vector<uint32_t> bad_offs = {0, 3, 4};
  const auto bad_view = make_view<const uint32_t>(bad_offs.data(), 3);
  Status st = call(bad_view, d_cache.host_ragged(bad_view));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("host.input_row_offsets"), std::string::npos) << st.to_string();
  // A sentinel page inside the visible range.
  std::vector<uint32_t> table = p.cache.raw_lookup_table();
  table[0] = uint32_t(p.cache.config().num_blocks);
  cuda::HostRagged host = d_cache.host_ragged(p.offv());
  host.lookup_table = make_view<const uint32_t>(table.data(), p.cache.config().batch_size,
                                                p.cache.config().max_pages_per_seq);
  st = call(p.offv(), host);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  QUANTKV_ASSERT_OK(cuda::synchronize(Context{}));
  EXPECT_EQ(d_out.download(), poisoned) << "a rejected call wrote to the output";
}

TEST(CudaIndexer, TopKFrom8192UsesTheSharedMemoryOptIn) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // The top-k kernel holds 8 * pow2(min(top_k, keys)) bytes of (key, index) pairs in dynamic
  // shared memory: 64 KB at top_k = 8192 and 128 KB at kMaxTopK = 16384, past the 48 KB a
  // launch gets without the opt-in. Both block sizes: decode rows (< 64 rows, > 8192 keys:
  // 1024 threads) and a prefill of 70 rows (512 threads); one row with fewer keys than top_k.
  const std::vector<Shape> cases = {
      {16, 64, 8192, 64, {1, 1}, {20000, 6000}, MaskType::kCausal},
      {8, 32, cuda::kMaxTopK, 64, {1}, {40000}, MaskType::kCausal},
      {4, 32, 8192, 64, {70}, {9000}, MaskType::kCausal},
  };
  for (const Shape& s : cases) {
    SCOPED_TRACE("top_k=" + std::to_string(s.top_k) + " T=" + std::to_string(s.seq_lens[0]));
    check_case(s, Fill::kExact);
    check_case(s, Fill::kRandom);
  }
}

TEST(CudaIndexer, HeadSize512) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // D = 512, the CUDA backend's limit: the scores kernel stages 128 keys and 64 heads of 512
  // fp16 values, about 196 KB of dynamic shared memory per block.
  for (const Shape& s : {Shape{64, 512, 64, 64, {3, 1}, {300, 700}, MaskType::kCausal},
                         Shape{8, 512, 16, 16, {5, 2}, {0, 33}, MaskType::kNull}}) {
    check_case(s, Fill::kExact);
    check_case(s, Fill::kRandom);
  }
}

TEST(CudaIndexer, HeadCountsThatAreNotAMultipleOf16) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // The scores kernel runs 64 heads per pass in four m16 tiles: partly filled tiles (H = 24,
  // 3) and a second pass of 8 heads (H = 72) read zero rows and zero weights past H.
  for (const Shape& s : {Shape{24, 64, 32, 16, {4, 1}, {100, 50}, MaskType::kCausal},
                         Shape{72, 128, 64, 64, {2, 1}, {300, 129}, MaskType::kCausal},
                         Shape{3, 48, 8, 4, {6}, {10}, MaskType::kNull}}) {
    SCOPED_TRACE("H=" + std::to_string(s.H));
    check_case(s, Fill::kExact);
    check_case(s, Fill::kRandom);
  }
}

TEST(CudaIndexer, RunsOnANonDefaultStream) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // A non-blocking stream: every launch, the workspace and the token-group upload must be
  // ordered on ctx.cuda_stream itself (nothing may rely on the legacy default stream).
  testing::TestStream stream;
  check_case(shapes()[0], Fill::kExact, stream.context());
  check_case(shapes()[5], Fill::kRandom, stream.context());
  check_case(decode_batch_of_80(), Fill::kExact, stream.context());
}

TEST(CudaIndexer, ConcurrentCallsWithDifferentSharedMemoryNeeds) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  // Two host threads, each on its own stream, call the same kernels with the smallest and the
  // largest dynamic shared memory (D = 32 and top_k = 16 against D = 512 and top_k = 8192;
  // both rows sets take the 1024-thread top-k kernel). The limits are raised once per device,
  // never per call, so one thread cannot lower them between the other's set and its launch.
  TestRng rng;
  Problem small =
      make_problem({4, 32, 16, 16, {2, 1}, {9000, 20}, MaskType::kCausal}, Fill::kExact, rng);
  Problem large = make_problem({64, 512, 8192, 64, {1, 1}, {9000, 12000}, MaskType::kCausal},
                               Fill::kExact, rng);
  const std::vector<int32_t> want_small = run_cpu(small), want_large = run_cpu(large);
  const DeviceProblem d_small(small), d_large(large);
  struct Outcome {
    int wrong = 0;
    Status first_error;
  };
  const auto worker = [](const DeviceProblem* d, const std::vector<int32_t>* want, Outcome* out) {
    testing::TestStream stream;
    for (int i = 0; i < 25; ++i) {
      Status st;
      const std::vector<int32_t> got = d->run(std::size_t(512) << 20, &st, stream.context());
      if (!st.ok() && out->first_error.ok()) out->first_error = st;
      if (!st.ok() || got != *want) ++out->wrong;
    }
  };
  Outcome small_out, large_out;
  std::thread a(worker, &d_small, &want_small, &small_out);
  std::thread b(worker, &d_large, &want_large, &large_out);
  a.join();
  b.join();
  EXPECT_EQ(small_out.wrong, 0) << small_out.first_error.to_string();
  EXPECT_EQ(large_out.wrong, 0) << large_out.first_error.to_string();
}

// ------------------------------------------------------------------ indexer K store

template <typename T>
void check_k_store(ScaleMode mode, const Context& ctx = Context{}) {
  TestRng rng;
  Problem p =
      make_problem({1, 48, 1, 5, {7, 0, 12}, {3, 9, 0}, MaskType::kCausal}, Fill::kExact, rng);
  std::vector<T> k(std::size_t(p.T * 48));
  for (auto& v : k) {
    const float x = rng.normal(0.0f, rng.uniform_int(0, 1) ? 3.0f : 0.001f);
    if constexpr (std::is_same_v<T, bfloat16>)
      v.bits = float_to_bf16(x);
    else
      v = x;
  }
  if (!k.empty()) {
    if constexpr (std::is_same_v<T, float>) k[5] = NAN;  // ignored by amax, stored as NaN
  }
  PagedKVCache gpu_cache = p.cache;  // same poison-free random contents on both sides
  DeviceArray<T> d_k(k);
  DeviceArray<uint32_t> d_offs(p.offs);
  DeviceCache d_cache(gpu_cache);
  const auto kv = make_view<const T>(k.data(), p.T, int64_t(48));
  QUANTKV_ASSERT_OK(indexer_k_store(kv, p.offv(), p.cache.view(), p.layer, mode, Context{}));
  QUANTKV_ASSERT_OK(
      cuda::indexer_k_store(make_view<const T>(d_k.get(), p.T, int64_t(48)),
                            make_view<const uint32_t>(d_offs.get(), int64_t(p.offs.size())),
                            d_cache.view(), p.layer, mode, d_cache.host_ragged(p.offv()), ctx));
  QUANTKV_ASSERT_OK(cuda::synchronize(ctx));
  EXPECT_EQ(d_cache.blocks(), p.cache.raw_blocks()) << "K bytes differ from the CPU store";
  EXPECT_EQ(d_cache.scales(), p.cache.raw_scales()) << "scales differ from the CPU store";
}

TEST(CudaIndexerKStore, MatchesTheCpuStoreBitForBit) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    check_k_store<float>(mode);
    check_k_store<bfloat16>(mode);
  }
}

TEST(CudaIndexerKStore, RunsOnANonDefaultStream) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  testing::TestStream stream;
  check_k_store<bfloat16>(ScaleMode::kFloat, stream.context());
}

// The sanitizer pass of scripts/gpu_check.sh runs CudaSmoke.*: each kernel once on a small
// shape (ties at the k-th score included), fast enough for memcheck and racecheck.
TEST(CudaSmoke, IndexerAndKStore) {
  QUANTKV_REQUIRE_CUDA_DEVICE();
  check_case(shapes()[3], Fill::kExact);
  check_case({8, 32, 40, 16, {1, 1}, {9000, 30}, MaskType::kCausal},
             Fill::kExact);  // 1024-thread top-k
  check_k_store<float>(ScaleMode::kPowerOfTwo);
}

}  // namespace
}  // namespace quantkv
