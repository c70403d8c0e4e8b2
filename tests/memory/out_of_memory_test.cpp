// Out of memory is a Status, never an exception or std::terminate (issue 15, item 3): every
// allocation a call makes is failed in turn (the 1st, then the 2nd, ...) until the call runs
// through; each failed call must return ok or kResourceExhausted and, when it fails, leave
// the outputs and the cache byte-for-byte unchanged.
//
// This executable replaces glibc's malloc family with wrappers that fail the N-th allocation
// after arming (operator new goes through malloc and throws std::bad_alloc; std::aligned_alloc
// returns null). Built only without sanitizers (they replace malloc themselves, and ASan's
// operator new aborts instead of throwing). The OpenMP runtime's own allocations are never
// failed: libgomp exits the process when one fails, by design, before any library code runs.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libc_alloc.hpp"
#include "quantkv/checkpoint.hpp"
#include "quantkv/moe.hpp"
#include "robustness_fixtures.hpp"
#include "safetensors_writer.hpp"

namespace {
// Allocations left before the failing one; < 0: disarmed.
std::atomic<int64_t> g_countdown{-1};
std::atomic<bool> g_failed{false};

bool from_openmp_runtime(void* caller) {
  Dl_info info;
  return dladdr(caller, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libgomp") != nullptr;
}

bool fail_now(void* caller) {
  if (g_countdown.load(std::memory_order_relaxed) < 0 || from_openmp_runtime(caller)) return false;
  if (g_countdown.fetch_sub(1, std::memory_order_relaxed) != 0) return false;
  g_failed = true;
  return true;
}
}  // namespace

extern "C" {
#define QUANTKV_CALLER __builtin_return_address(0)
void* malloc(size_t n) { return fail_now(QUANTKV_CALLER) ? nullptr : __libc_malloc(n); }
void* calloc(size_t n, size_t m) {
  return fail_now(QUANTKV_CALLER) ? nullptr : __libc_calloc(n, m);
}
void* realloc(void* old, size_t n) {
  return fail_now(QUANTKV_CALLER) ? nullptr : __libc_realloc(old, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) {
  return fail_now(QUANTKV_CALLER) ? nullptr : __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  return fail_now(QUANTKV_CALLER) ? nullptr : __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  void* p = fail_now(QUANTKV_CALLER) ? nullptr : __libc_memalign(a, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}

namespace quantkv {
namespace {

constexpr uint64_t kSeed = 15;

// Fails allocation 0, 1, 2, ... of `call` (on a fresh fixture each time) until a call
// completes without a failed allocation. Returns how many allocations were failed.
template <typename Fx>
int fail_each_allocation(std::function<std::vector<uint8_t>(Fx&)> written,
                         std::function<Status(Fx&)> call,
                         std::function<void(Fx&)> setup = nullptr) {
  for (int n = 0;; ++n) {
    Fx f;
    if (setup) setup(f);
    f.build(kSeed);
    const std::vector<uint8_t> before = written(f);
    g_failed = false;
    g_countdown = n;
    const Status st = call(f);
    g_countdown = -1;
    if (!g_failed) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      return n;
    }
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kResourceExhausted)
          << "allocation " << n << ": " << st.to_string();
      EXPECT_EQ(written(f), before) << "allocation " << n << " failed and the call wrote";
    }
  }
}

template <typename T>
void append(std::vector<uint8_t>& b, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  b.insert(b.end(), p, p + v.size() * sizeof(T));
}
std::vector<uint8_t> cache_bytes(PagedKVCache& c) {
  std::vector<uint8_t> b = c.raw_blocks();
  append(b, c.raw_scales());
  return b;
}

Context two_threads() {
  Context c;
  c.num_threads = 2;
  return c;
}

TEST(OutOfMemory, IndexerReturnsResourceExhausted) {
  using F = testing::IndexerFixture;
  const int n = fail_each_allocation<F>(
      [](F& f) {
        auto b = cache_bytes(f.cache);
        append(b, f.out);
        return b;
      },
      [](F& f) { return f.run(two_threads()); });
  EXPECT_GT(n, 3) << "the call allocates its plan and workspace";
}

TEST(OutOfMemory, FusedQkvReturnsResourceExhausted) {
  using F = testing::QkvFixture;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP8}) {
    const int n = fail_each_allocation<F>(
        [](F& f) {
          auto b = cache_bytes(f.cache);
          append(b, f.out);
          return b;
        },
        [](F& f) { return f.run(two_threads()); }, [format](F& f) { f.format = format; });
    EXPECT_GT(n, 3) << block_format_name(format);
  }
}

TEST(OutOfMemory, PrepareQkvWeightsReturnsResourceExhausted) {
  using F = testing::QkvFixture;
  fail_each_allocation<F>(
      [](F&) { return std::vector<uint8_t>{}; },
      [](F& f) {
        PreparedQkvWeights w;
        const Status st = prepare_qkv_weights(f.weight_view(), f.weight_scale_view(), f.format, &w,
                                              two_threads());
        if (!st.ok() && !w.empty())
          return Status{StatusCode::kInternal, "a failed prepare left a prepared-looking weight"};
        return st;
      });
}

TEST(OutOfMemory, KStoreAndQuantizeReturnResourceExhausted) {
  using K = testing::KStoreFixture;
  fail_each_allocation<K>([](K& f) { return cache_bytes(f.cache); },
                          [](K& f) { return f.run(two_threads()); });
  using Z = testing::QuantizeFixture;
  fail_each_allocation<Z>(
      [](Z& f) {
        auto b = f.data;
        append(b, f.scales);
        return b;
      },
      [](Z& f) { return f.run(two_threads()); });
}

// A fixture that is only a cache configuration (for fail_each_allocation).
struct CacheCreateFixture {
  PagedKVCache cache;
  void build(uint64_t) {}
};

TEST(OutOfMemory, CacheCreateAndScaleConvertersReturnResourceExhausted) {
  using C = CacheCreateFixture;
  fail_each_allocation<C>([](C&) { return std::vector<uint8_t>{}; },
                          [](C& f) {
                            PagedKVCacheConfig c;
                            c.num_blocks = 6;
                            c.scale_granularity = 64;
                            c.batch_size = 2;
                            c.max_pages_per_seq = 3;
                            return PagedKVCache::create(c, 7, &f.cache);
                          });
  using Z = testing::QuantizeFixture;
  fail_each_allocation<Z>([](Z& f) { return f.data; },
                          [](Z& f) {
                            return swizzled_to_linear_scales(
                                f.scales_view(), make_view(f.data.data(), f.M, int64_t(4)));
                          });
}

TEST(OutOfMemory, HugeCacheCreateReturnsResourceExhausted) {
  // 2^58 bytes fit in int64 but not in any x86-64 address space (47 or 56 bits).
  PagedKVCacheConfig c;
  c.dtype = DType::kE4M3;
  c.num_blocks = int64_t(1) << 20;
  c.page_size = int64_t(1) << 19;
  c.head_size = int64_t(1) << 19;
  c.kv_dim = 1;
  PagedKVCache cache;
  const Status st = PagedKVCache::create(c, 1, &cache);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
}

// A small MoE layer (E = 3, H = 64, I = 32 NVFP4, T = 9, k = 2), prepared before the
// allocations are failed; the call runs quantised (W4A4) or weight-only.
struct MoeFixture {
  static constexpr int64_t kE = 3, kH = 64, kI = 32, kT = 9, kK = 2;
  bool quantised = false;
  std::vector<uint8_t> w13, s13, w2, s2;
  std::vector<bfloat16> x;
  std::vector<int32_t> ids;
  std::vector<float> weights, y;
  PreparedExperts experts;
  void build(uint64_t seed) {
    w13.resize(std::size_t(kE * 2 * kI * kH / 2));
    s13.assign(std::size_t(kE * 2 * kI * kH / 16), 0x30);
    w2.resize(std::size_t(kE * kH * kI / 2));
    s2.assign(std::size_t(kE * kH * kI / 16), 0x30);
    for (std::size_t i = 0; i < w13.size(); ++i) w13[i] = uint8_t(i * 37 + seed);
    for (std::size_t i = 0; i < w2.size(); ++i) w2[i] = uint8_t(i * 53 + seed);
    x.resize(std::size_t(kT * kH));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = bfloat16{float_to_bf16(float(i % 9) - 4.0f)};
    for (int64_t t = 0; t < kT; ++t) {
      ids.push_back(int32_t(t % kE));
      ids.push_back(int32_t((t + 1) % kE));
      weights.push_back(0.75f);
      weights.push_back(0.25f);
    }
    y.assign(std::size_t(kT * kH), -1.0f);
    ExpertsSource s;
    s.w13 = make_view<const uint8_t>(w13.data(), kE, 2 * kI, kH / 2);
    s.w13_scale = make_view<const uint8_t>(s13.data(), kE, 2 * kI, kH / 16);
    s.w2 = make_view<const uint8_t>(w2.data(), kE, kH, kI / 2);
    s.w2_scale = make_view<const uint8_t>(s2.data(), kE, kH, kI / 16);
    if (!prepare_experts(s, &experts, {}).ok()) std::abort();
  }
  Status run(const Context& ctx) {
    FusedExpertsArgs a;
    a.x = make_view<const bfloat16>(x.data(), kT, kH);
    a.topk_ids = make_view<const int32_t>(ids.data(), kT, kK);
    a.topk_weights = make_view<const float>(weights.data(), kT, kK);
    a.experts = &experts;
    a.quantize_activations = quantised;
    a.y_f32 = make_view(y.data(), kT, kH);
    return fused_experts(a, ctx);
  }
};

// In one pass, and in token chunks (a 1-byte experts budget: one token per chunk), where a
// failure in a later chunk must still leave y untouched.
TEST(OutOfMemory, FusedExpertsReturnsResourceExhausted) {
  using F = MoeFixture;
  for (bool chunked : {false, true}) {
    for (bool quantised : {false, true}) {
      Context ctx = two_threads();
      if (chunked) ctx.experts_budget_bytes = 1;
      const int n = fail_each_allocation<F>(
          [](F& f) {
            std::vector<uint8_t> b;
            append(b, f.y);
            return b;
          },
          [ctx](F& f) { return f.run(ctx); }, [quantised](F& f) { f.quantised = quantised; });
      EXPECT_GT(n, 5) << (quantised ? "quantised" : "weight-only") << (chunked ? ", chunked" : "");
    }
  }
}

// One layer of per-expert NVFP4 experts (compressed-tensors, with biases) in a file, opened
// before the allocations are failed; load_experts into an output that holds a marker.
struct ExpertsLoadFixture {
  std::unique_ptr<testing::TempFile> file;
  SafetensorsCheckpoint ckpt;
  LoadedExperts out;
  void build(uint64_t seed) {
    std::vector<testing::StEntry> entries;
    uint8_t fill = uint8_t(seed);
    for (int e = 0; e < 3; ++e) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string p = "experts." + std::to_string(e) + "." + proj;
        const int64_t n = proj[0] == 'd' ? 64 : 32, k = proj[0] == 'd' ? 32 : 64;
        entries.push_back({p + ".weight_packed",
                           "U8",
                           {n, k / 2},
                           std::vector<uint8_t>(std::size_t(n * k / 2), fill++)});
        entries.push_back({p + ".weight_scale",
                           "F8_E4M3",
                           {n, k / 16},
                           std::vector<uint8_t>(std::size_t(n * k / 16), 0x38)});
        entries.push_back(testing::st_f32(p + ".weight_global_scale", 100.0f));
        entries.push_back({p + ".bias", "F32", {n}, std::vector<uint8_t>(std::size_t(n * 4), 0)});
      }
    }
    file = std::make_unique<testing::TempFile>(testing::write_safetensors(entries));
    ASSERT_TRUE(SafetensorsCheckpoint::open(file->path(), &ckpt).ok());
    out.w2_bias = {42.0f};
  }
};

TEST(OutOfMemory, LoadExpertsReturnsResourceExhausted) {
  using F = ExpertsLoadFixture;
  const int n = fail_each_allocation<F>(
      [](F& f) {
        std::vector<uint8_t> b;
        append(b, f.out.w2_bias);
        b.push_back(uint8_t(f.out.experts.num_experts()));
        return b;
      },
      [](F& f) { return load_experts(f.ckpt, "experts", &f.out, two_threads()); });
  EXPECT_GT(n, 5);
}

}  // namespace
}  // namespace quantkv
