// The indexer's memory bound (contract §3): at 128K keys x 4096 new tokens (the score matrix
// would be 4096 x 131072 x 4 B = 2 GiB) the extra memory of a call stays within the context's
// scores budget, and a budget too small for one row fails at once with kResourceExhausted.
//
// Measurement: this executable replaces glibc's malloc family (malloc, calloc, realloc, free,
// aligned_alloc, posix_memalign, memalign; operator new goes through malloc) with counting
// wrappers around glibc's own __libc_* functions, and records the peak of the bytes in use
// (malloc_usable_size of every live block) above the level before the call: every heap
// allocation of the call, by any thread (std::vector, std::aligned_alloc, the OpenMP runtime's
// heap use), is seen. Thread stacks (mmap by pthread) are not heap and not counted.
// Built only without sanitizers (they replace malloc themselves).
//
// Shape: the DeepSeek-V3.2 extents H = 64, D = 128 would be ~70 TFLOP, far too slow for a test
// on two cores. The score workspace does not depend on H or D (one fp32 per visible key and row,
// plus per-thread scratch that grows with H·D), so the test keeps the token and key counts of
// the issue and uses H = 1, D = 16 (the smallest head dim the kernels accept):
// 4096 tokens over a cache of 126976 tokens, causal, top_k 2048.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "libc_alloc.hpp"
#include "quantkv/indexer.hpp"

namespace {
std::atomic<int64_t> g_in_use{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int> g_warm{0};

// Large blocks are mmapped and their usable size rounded up to whole pages, by how much depends
// on glibc's dynamic mmap threshold (the history of the process); serving every block from the
// heap makes the usable size the request rounded to 16 bytes, the same in every process.
const bool g_no_mmap = mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1;

void note_alloc(void* p) {
  if (!p) return;
  const int64_t now =
      g_in_use.fetch_add(int64_t(malloc_usable_size(p)), std::memory_order_relaxed) +
      int64_t(malloc_usable_size(p));
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
void note_free(void* p) {
  if (p) g_in_use.fetch_sub(int64_t(malloc_usable_size(p)), std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  note_alloc(p);
  return p;
}
void* calloc(size_t n, size_t m) {
  void* p = __libc_calloc(n, m);
  note_alloc(p);
  return p;
}
void* realloc(void* old, size_t n) {
  note_free(old);
  void* p = __libc_realloc(old, n);
  if (p)
    note_alloc(p);
  else if (old && n)
    note_alloc(old);  // failed: the old block lives on
  return p;
}
void free(void* p) {
  note_free(p);
  __libc_free(p);
}
void* memalign(size_t a, size_t n) {
  void* p = __libc_memalign(a, n);
  note_alloc(p);
  return p;
}
void* aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void** out, size_t a, size_t n) {
  void* p = memalign(a, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}

namespace quantkv {
namespace {

constexpr int64_t kTokens = 4096, kKeys = 131072, kH = 1, kD = 16, kTopK = 2048, kPage = 64;

struct BigIndexerCall {
  std::vector<uint8_t> blocks;
  std::vector<float> scales;
  std::vector<uint32_t> cache_lengths{uint32_t(kKeys - kTokens)}, lookup,
      offs{0, uint32_t(kTokens)};
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  std::vector<int32_t> out;
  PagedKVCacheCollection kc;

  BigIndexerCall() {
    const int64_t pages = kKeys / kPage;
    blocks.resize(size_t(pages * kPage * kD));
    uint32_t x = 12345;
    auto next = [&x] {
      x = x * 1664525u + 1013904223u;
      return x >> 8;
    };
    for (auto& b : blocks) {
      b = uint8_t(next());
      if ((b & 0x7F) == 0x7F) b ^= 1;
    }
    scales.resize(size_t(pages * kPage));
    for (auto& s : scales) s = float(next() % 1000 + 1) / 1024.0f;
    lookup.resize(size_t(pages));
    for (int64_t p = 0; p < pages; ++p)
      lookup[p] = uint32_t((p * 7919) % pages);  // shuffled, a permutation
    q.resize(size_t(kTokens * kH * kD));
    for (auto& v : q) {
      v.bits = uint8_t(next());
      if ((v.bits & 0x7F) == 0x7F) v.bits ^= 1;
    }
    q_s.assign(size_t(kTokens * kH), 0.5f);
    out.assign(size_t(kTokens * kTopK), -7);
    kc.blocks = blocks.data();
    kc.dtype = DType::kE4M3;
    kc.num_blocks = pages;
    kc.kv_dim = 1;
    kc.num_layers = 1;
    kc.page_size = kPage;
    kc.num_heads = 1;
    kc.head_size = kD;
    kc.scales = scales.data();
    kc.scale_granularity = kD;
    kc.cache_lengths = make_view<const uint32_t>(cache_lengths.data(), int64_t(1));
    kc.lookup_table = make_view<const uint32_t>(lookup.data(), int64_t(1), pages);
  }
  // Runs the indexer; returns the peak heap bytes above the level before the call.
  Status run(const Context& ctx, int64_t* peak_extra) {
    // The OpenMP runtime allocates its thread pool (~24 KB) at the first parallel region of a
    // thread count: a one-time cost of the process, not the call's workspace. Start it first.
#pragma omp parallel num_threads(ctx.num_threads)
    { g_warm.fetch_add(1, std::memory_order_relaxed); }
    const int64_t base = g_in_use.load();
    g_peak.store(base);
    const Status st = mla_indexer_ragged_float8_paged(
        make_view(out.data(), kTokens, kTopK),
        make_view<const float8_e4m3fn>(q.data(), kTokens, kH, kD),
        make_view<const float>(q_s.data(), kTokens, kH),
        make_view<const uint32_t>(offs.data(), int64_t(2)), kc, 0, MaskType::kCausal, ctx);
    *peak_extra = g_peak.load() - base;
    return st;
  }
};

TEST(IndexerMemory, CountingAllocatorSeesAlignedAllocations) {
  EXPECT_TRUE(g_no_mmap);
  const int64_t base = g_in_use.load();
  g_peak.store(base);
  void* p = std::aligned_alloc(64, 1 << 20);
  std::vector<char> v(1 << 20);
  EXPECT_GE(g_peak.load() - base, 2 << 20);
  std::free(p);
}

// 128K keys x 4096 tokens under a 64 MiB budget (the matrix would be 2 GiB); then under the
// default 512 MiB. Either way the peak must be within the budget.
TEST(IndexerMemory, PeakExtraMemoryWithinScoresBudget) {
  BigIndexerCall call;
  for (std::size_t budget : {std::size_t(64) << 20, std::size_t(512) << 20}) {
    Context ctx;
    ctx.num_threads = 2;
    ctx.scores_budget_bytes = budget;
    int64_t peak = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = call.run(ctx, &peak);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::printf(
        "[ memory   ] %lld tokens x %lld keys, budget %zu MiB: peak extra heap %.1f MiB = %lld "
        "bytes (%.1f s)\n",
        (long long)kTokens, (long long)kKeys, budget >> 20, double(peak) / (1 << 20),
        (long long)peak, secs);
    EXPECT_LE(peak, int64_t(budget)) << "the indexer exceeded its scores budget";
    // It did real work: the last row sees every key and returns top_k of them.
    EXPECT_NE(call.out[size_t((kTokens - 1) * kTopK + kTopK - 1)], -1);
  }
}

// A budget below one row's need fails at once, without writing, whatever the problem size.
TEST(IndexerMemory, TooSmallBudgetIsAnErrorNotALoop) {
  BigIndexerCall call;
  for (std::size_t budget : {std::size_t(0), std::size_t(4096), std::size_t(256) << 10}) {
    Context ctx;
    ctx.num_threads = 2;
    ctx.scores_budget_bytes = budget;
    std::fill(call.out.begin(), call.out.end(), -7);
    int64_t peak = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = call.run(ctx, &peak);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    EXPECT_NE(st.message().find("scores_budget_bytes"), std::string::npos) << st.message();
    EXPECT_LT(secs, 5.0) << "rejecting a budget took too long";
    EXPECT_TRUE(std::all_of(call.out.begin(), call.out.end(), [](int32_t v) { return v == -7; }))
        << "wrote output before failing";
  }
}

}  // namespace
}  // namespace quantkv
