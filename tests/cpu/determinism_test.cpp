// Determinism: every operation gives bitwise identical outputs (and caches) on repeated runs,
// for 1, 2 and 5 threads (more than this machine's cores), and on every ISA path. The kernels'
// docs (docs/indexer.md, docs/qkv_fp4.md) promise cross-ISA bit equality for all inputs (one
// canonical reduction order), so the random cases are compared across ISAs too, not only the
// integer-exact ones; the integer-exact cases (small integer codes, power-of-two scales: every
// score and product exact in fp32) are run as well, where any correct kernel must agree.
// The indexer is also run under score budgets that force different chunkings.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "robustness_fixtures.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::for_each_isa;
using testing::TestRng;

constexpr int kThreadCounts[] = {1, 2, 5};

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Budgets: 0 = the default (one chunk); kTight / kTightish = the smallest budget the indexer
// accepts for this thread count (its scratch grows with the threads), or 1.5x that: many chunks.
constexpr std::size_t kTight = 1, kTightish = 2;
std::function<Status(const Context&)> g_budget_probe;  // the call whose minimal budget is sought
std::map<int, std::size_t> g_tight;                    // per thread count, for g_budget_probe
void set_budget_probe(std::function<Status(const Context&)> probe) {
  g_budget_probe = std::move(probe);
  g_tight.clear();
}
std::size_t budget_for(std::size_t which, const Context& base) {
  if (which != kTight && which != kTightish) return which;
  auto it = g_tight.find(base.num_threads);
  if (it != g_tight.end()) return which == kTight ? it->second : it->second + it->second / 2;
  std::size_t b = 16 << 10;
  for (;;) {
    Context c = base;
    c.scores_budget_bytes = b;
    const Status st = g_budget_probe(c);
    if (st.ok()) break;
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    if (st.code() != StatusCode::kResourceExhausted || b > (std::size_t(1) << 32)) break;
    b += b / 8;
  }
  g_tight[base.num_threads] = b;
  return which == kTight ? b : b + b / 2;
}

// Runs `run(ctx)` for every ISA, thread count and twice each; every result must equal the
// first. `result()` returns the bytes that the op wrote.
template <typename Run, typename Result>
void expect_identical(Run run, Result result, const std::vector<std::size_t>& budgets = {0}) {
  std::vector<uint8_t> first;
  bool have = false;
  for_each_isa([&](IsaLevel) {
    for (int threads : kThreadCounts) {
      for (std::size_t budget : budgets) {
        for (int rep = 0; rep < 2; ++rep) {
          SCOPED_TRACE("threads " + std::to_string(threads) + ", budget " + std::to_string(budget) +
                       ", run " + std::to_string(rep));
          Context ctx;
          ctx.num_threads = threads;
          if (budget) ctx.scores_budget_bytes = budget_for(budget, ctx);
          const Status st = run(ctx);
          ASSERT_TRUE(st.ok()) << st.to_string();
          std::vector<uint8_t> r = result();
          if (!have) {
            first = std::move(r);
            have = true;
          } else {
            ASSERT_TRUE(r == first) << "output differs from the first run (scalar, 1 thread)";
          }
        }
      }
    }
  });
}

// An indexer batch with partial pages, an empty sequence and long contexts.
testing::IndexerFixture indexer_case(TestRng& rng, bool integer_exact) {
  testing::IndexerFixture f;
  f.H = 4;
  f.D = 64;
  f.top_k = 24;
  f.page_size = 16;
  f.cache_lens = {0, 150, 37, 300};
  f.seq_lens = {9, 0, 21, 7};
  f.build(rng.engine()());
  if (integer_exact) {
    // Codes of small integers (|v| <= 4: exact products, sums far below 2^24), power-of-two
    // scales and weights: every score is exact, and ties are frequent (order by position).
    const uint8_t ints[] = {0x00, 0x38, 0x40, 0x44, 0x48, 0xB8, 0xC0, 0xC4, 0xC8};
    for (auto& b : f.cache.raw_blocks()) b = ints[rng.uniform_int(0, 8)];
    for (auto& v : f.q) v.bits = ints[rng.uniform_int(0, 8)];
    for (auto& s : f.cache.raw_scales()) s = std::ldexp(1.0f, int(rng.uniform_int(-3, 3)));
    for (auto& w : f.q_s)
      w = std::ldexp(rng.uniform_int(0, 1) ? 1.0f : -1.0f, int(rng.uniform_int(-2, 2)));
  }
  return f;
}

TEST(Determinism, IndexerRandom) {
  TestRng rng;
  for (MaskType mask : {MaskType::kCausal, MaskType::kNull}) {
    auto f = indexer_case(rng, false);
    f.mask = mask;
    // Budgets: the default (one chunk) and two that force several chunks.
    auto run = [&](const Context& ctx) {
      std::fill(f.out.begin(), f.out.end(), -9);
      return f.run(ctx);
    };
    set_budget_probe(run);
    // Budgets: the default (one chunk) and, for the causal case, one that forces many chunks.
    expect_identical(
        run, [&] { return raw(f.out); },
        mask == MaskType::kCausal ? std::vector<std::size_t>{0, kTightish}
                                  : std::vector<std::size_t>{0});
  }
}

TEST(Determinism, IndexerIntegerExact) {
  TestRng rng;
  auto f = indexer_case(rng, true);
  auto run = [&](const Context& ctx) {
    std::fill(f.out.begin(), f.out.end(), -9);
    return f.run(ctx);
  };
  set_budget_probe(run);
  expect_identical(run, [&] { return raw(f.out); }, {0, kTight});
}

TEST(Determinism, IndexerKStore) {
  TestRng rng;
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    testing::KStoreFixture f;
    f.D = 128;
    f.page_size = 16;
    f.cache_lens = {5, 0, 40};
    f.seq_lens = {30, 17, 0};
    f.mode = mode;
    f.build(rng.engine()());
    expect_identical([&](const Context& ctx) { return f.run(ctx); },
                     [&] {
                       auto b = raw(f.cache.raw_blocks());
                       auto s = raw(f.cache.raw_scales());
                       b.insert(b.end(), s.begin(), s.end());
                       return b;
                     });
  }
}

TEST(Determinism, IndexerQPrepare) {
  TestRng rng;
  testing::QPrepareFixture f;
  f.T = 23;
  f.H = 8;
  f.D = 64;
  f.build(rng.engine()());
  expect_identical([&](const Context& ctx) { return f.run(ctx); },
                   [&] {
                     auto b = raw(f.q8);
                     auto s = raw(f.q_s);
                     b.insert(b.end(), s.begin(), s.end());
                     return b;
                   });
}

testing::QkvFixture qkv_case(TestRng& rng, BlockFormat format, DType dtype, bool integer_exact) {
  testing::QkvFixture f;
  f.format = format;
  f.cache_dtype = dtype;
  f.K = 128;
  f.q_dim = 96;
  f.num_kv_heads = 2;
  f.head_size = 24;
  f.page_size = 8;
  f.cache_lens = {3, 0, 17};
  f.seq_lens = {40, 0, 95};  // M = 135: more than one 128-row scale tile
  f.build(rng.engine()());
  if (integer_exact) {
    // Power-of-two block scales near 1: every block product and sum is exact in fp32.
    for (auto& b : f.input_scale)
      if (b)
        b = has_e8m0_scales(format) ? uint8_t(126 + rng.uniform_int(0, 2))
                                    : uint8_t(0x30 + 8 * rng.uniform_int(0, 2));
    for (auto& b : f.weight_scale)
      if (b)
        b = has_e8m0_scales(format) ? uint8_t(126 + rng.uniform_int(0, 2))
                                    : uint8_t(0x30 + 8 * rng.uniform_int(0, 2));
    if (format == BlockFormat::kMXFP8) {
      const uint8_t ints[] = {0x00, 0x38, 0x40, 0x44, 0xB8, 0xC0};
      for (auto& b : f.hidden) b = ints[rng.uniform_int(0, 5)];
      for (auto& b : f.weight) b = ints[rng.uniform_int(0, 5)];
    }
    f.tensor_sf = format == BlockFormat::kMXFP8 ? 1.0f : 0.25f;
  }
  return f;
}

TEST(Determinism, FusedQkv) {
  TestRng rng;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (bool exact : {true, false}) {
      // The integer-exact case into a bf16 cache, the random one into a saturating e4m3 cache.
      const DType dtype = exact ? DType::kBF16 : DType::kE4M3;
      SCOPED_TRACE(std::string(block_format_name(format)) +
                   (exact ? " integer-exact " : " random ") + dtype_name(dtype));
      auto f = qkv_case(rng, format, dtype, exact);
      expect_identical([&](const Context& ctx) { return f.run(ctx); },
                       [&] {
                         auto b = raw(f.out);
                         auto c = raw(f.cache.raw_blocks());
                         b.insert(b.end(), c.begin(), c.end());
                         return b;
                       });
    }
  }
}

TEST(Determinism, Quantize) {
  TestRng rng;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    SCOPED_TRACE(block_format_name(format));
    testing::QuantizeFixture f;
    f.format = format;
    f.M = 135;
    f.K = 320;
    f.build(rng.engine()());
    expect_identical([&](const Context& ctx) { return f.run(ctx); },
                     [&] {
                       auto b = raw(f.data);
                       auto s = raw(f.scales);
                       b.insert(b.end(), s.begin(), s.end());
                       return b;
                     });
  }
}

}  // namespace
}  // namespace quantkv
