// The edges of the contract (issue 15) that are not single bad arguments (those are rows of
// bad_inputs_test.cpp): element counts that saturate, thread counts above the cores, a lookup
// table whose capacity overflows, metadata changed by another thread during a call, and the
// defined outcome of block-scale products that overflow fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "robustness_fixtures.hpp"

namespace quantkv {
namespace {

constexpr uint64_t kSeed = 1515;

TEST(Edges, NumelSaturatesInsteadOfWrapping) {
  const TensorView<int32_t, 2> v{nullptr, {4, int64_t(1) << 62}, {int64_t(1) << 62, 1}};
  EXPECT_EQ(v.numel(), INT64_MAX);
  EXPECT_FALSE(v.empty());
}

TEST(Edges, ThreadCountIsCapped) {
  Context ctx;
  EXPECT_EQ(max_num_threads(), std::max(available_cores(), kThreadCapFloor));
  ctx.num_threads = 4096;
  EXPECT_EQ(resolved_num_threads(ctx), max_num_threads());
  EXPECT_LT(resolved_num_threads(ctx), 4096);
  // Below the floor a request is honoured even on a machine with fewer cores.
  ctx.num_threads = kThreadCapFloor;
  EXPECT_EQ(resolved_num_threads(ctx), kThreadCapFloor);
  ctx.num_threads = kThreadCapFloor + 1;  // just above the floor: capped at the cores again
  EXPECT_EQ(resolved_num_threads(ctx), std::min(kThreadCapFloor + 1, max_num_threads()));
  ctx.num_threads = 3;
  EXPECT_EQ(resolved_num_threads(ctx), 3);
  ctx.num_threads = 1;
  EXPECT_EQ(resolved_num_threads(ctx), 1);
  // An op asked for 4096 threads runs with the capped count and gives the same bits.
  testing::QkvFixture a, b;
  a.build(kSeed);
  b.build(kSeed);
  ASSERT_TRUE(a.run(ctx).ok());
  ctx.num_threads = 4096;
  ASSERT_TRUE(b.run(ctx).ok());
  EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(bfloat16)));
  EXPECT_EQ(a.cache.raw_blocks(), b.cache.raw_blocks());
}

TEST(Edges, LookupTableCapacityDoesNotWrap) {
  // max_pages_per_seq * page_size = 2^31 * 2^33 = 2^64 wraps to 0 in int64; the table holds
  // every position (a stride-0 row: one real page repeated), so 5 positions fit.
  const uint32_t page = 0, length = 5, offs[2] = {0, 0};
  PagedKVCacheCollection c;
  c.blocks = &c;
  c.num_blocks = 1;
  c.page_size = int64_t(1) << 33;
  c.num_heads = 1;
  c.head_size = 1;
  c.cache_lengths = make_view<const uint32_t>(&length, int64_t(1));
  c.lookup_table = {&page, {1, int64_t(1) << 31}, {1, 0}};
  const Status st =
      validate_ragged_cache(c, make_view<const uint32_t>(offs, int64_t(2)), true, "cache");
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// Another thread flips a cache length between two valid values while the op runs. The op
// must use one snapshot: every index it returns is a position the larger length allows, and
// nothing is read outside the cache (ASan in CI). A deliberate data race on the lengths
// (the writer is atomic, the op's single read is not), so not part of the TSan run.
template <typename Fx, typename Check>
void race_cache_length(Fx& f, uint32_t a, uint32_t b, int iterations, Check check) {
  std::atomic<bool> stop{false};
  std::atomic_ref<uint32_t> length(f.cache.raw_cache_lengths()[0]);
  std::thread writer([&] {
    for (uint32_t i = 0; !stop.load(std::memory_order_relaxed); ++i)
      length.store(i % 2 ? a : b, std::memory_order_relaxed);
  });
  for (int i = 0; i < iterations && !::testing::Test::HasFailure(); ++i) {
    Context ctx;
    ctx.num_threads = 1;
    const Status st = f.run(ctx);
    EXPECT_TRUE(st.ok()) << st.to_string();
    check(f);
  }
  stop = true;
  writer.join();
}

TEST(Edges, IndexerUsesOneSnapshotOfTheCacheLengths) {
  testing::IndexerFixture f;
  f.mask = MaskType::kNull;
  f.build(kSeed);
  // Sequence 0: 2 new rows over 3 (or 1) cached tokens: keys below 5.
  race_cache_length(f, 1, 3, 2000, [](testing::IndexerFixture& g) {
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t j = 0; j < g.top_k; ++j) {
        const int32_t idx = g.out[size_t(r * g.top_k + j)];
        ASSERT_TRUE(idx >= -1 && idx < 5) << "row " << r << " index " << idx;
      }
    }
  });
}

TEST(Edges, FusedQkvUsesOneSnapshotOfTheCacheLengths) {
  testing::QkvFixture f;
  f.build(kSeed);
  // What sequence 1's pages hold after a call without interference: a racing length of
  // sequence 0 must never move a K/V row into them.
  PagedKVCacheCollection v = f.cache.view();
  ASSERT_TRUE(f.run().ok());
  const std::vector<uint8_t> expected = f.cache.raw_blocks();
  const int64_t page_bytes = v.total_elements() / v.num_blocks * int64_t(dtype_size(v.dtype));
  auto seq1_pages_match = [&](testing::QkvFixture& g) {
    for (int64_t p = 0; p < g.cache.pages_used(1); ++p) {
      const int64_t page =
          g.cache.raw_lookup_table()[size_t(g.cache.config().max_pages_per_seq + p)];
      ASSERT_EQ(0, std::memcmp(g.cache.raw_blocks().data() + page * page_bytes,
                               expected.data() + page * page_bytes, size_t(page_bytes)))
          << "sequence 1's page " << page << " changed";
    }
  };
  race_cache_length(f, 1, 3, 500, seq1_pages_match);
}

// e8m0 scales 0xFE (2^127) on both operands: the block product 2^254 is +inf in fp32, so zero
// data gives 0 * inf = NaN. The defined outcome (docs/numerics.md): the product of the two
// block scales is formed in fp32, as in the contract; an overflowing product yields inf / NaN, not
// an error. This test pins it so a change is deliberate.
TEST(Edges, OverflowingScaleProductIsNaNForZeroData) {
  testing::QkvFixture f;
  f.format = BlockFormat::kMXFP8;
  f.build(kSeed);
  std::fill(f.hidden.begin(), f.hidden.end(), uint8_t{0});
  for (int64_t r = 0; r < f.M(); ++r)
    for (int64_t c = 0; c < f.kb(); ++c) f.input_scale[swizzled_scale_offset(r, c, f.kb())] = 0xFE;
  for (int64_t r = 0; r < f.N(); ++r)
    for (int64_t c = 0; c < f.kb(); ++c) f.weight_scale[swizzled_scale_offset(r, c, f.kb())] = 0xFE;
  const Status st = f.run();
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (const bfloat16 v : f.out)
    EXPECT_TRUE(std::isnan(bf16_to_float(v.bits))) << std::hex << v.bits;
}

}  // namespace
}  // namespace quantkv
