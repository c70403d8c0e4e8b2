// The paged cache: addressing, page assignment, validation with named errors.
#include "quantkv/paged_kv.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "test_util.hpp"

namespace quantkv {
namespace {

PagedKVCacheConfig small_config() {
  PagedKVCacheConfig c;
  c.dtype = DType::kF32;
  c.num_blocks = 12;
  c.kv_dim = 2;
  c.num_layers = 3;
  c.page_size = 4;
  c.num_heads = 2;
  c.head_size = 8;
  c.batch_size = 3;
  c.max_pages_per_seq = 4;
  return c;
}

TEST(PagedKV, ElementOffsetIsRowMajorOverTheSixDims) {
  PagedKVCache cache;
  ASSERT_TRUE(PagedKVCache::create(small_config(), 7, &cache).ok());
  const PagedKVCacheCollection v = cache.view();
  const int64_t shape[6] = {12, 2, 3, 4, 2, 8};
  int64_t expected = 0;
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d)
          for (int64_t e = 0; e < shape[4]; ++e)
            for (int64_t f = 0; f < shape[5]; ++f)
              ASSERT_EQ(v.element_offset(a, b, c, d, e, f), expected++);
  EXPECT_EQ(v.total_elements(), expected);
}

TEST(PagedKV, ReservedPagesAreDistinctShuffledAndAddressable) {
  PagedKVCache cache;
  ASSERT_TRUE(PagedKVCache::create(small_config(), 11, &cache).ok());
  ASSERT_TRUE(cache.reserve(0, 13).ok());  // 4 pages
  ASSERT_TRUE(cache.reserve(1, 5).ok());   // 2 pages
  ASSERT_TRUE(cache.reserve(2, 0).ok());   // none
  EXPECT_EQ(cache.pages_used(0), 4);
  EXPECT_EQ(cache.pages_used(1), 2);
  EXPECT_EQ(cache.pages_used(2), 0);
  EXPECT_EQ(cache.free_pages(), 6);
  std::set<uint32_t> pages;
  const auto& table = cache.raw_lookup_table();
  for (uint32_t p : table) {
    if (p < 12) {
      EXPECT_TRUE(pages.insert(p).second) << "page shared";
    }
  }
  EXPECT_EQ(pages.size(), 6u);
  EXPECT_EQ(table[2 * 4], 12u) << "unassigned entries hold the sentinel num_blocks";

  // Write through the view, read back through get().
  PagedKVCacheCollection v = cache.view();
  const int64_t pos = 9, layer = 2, head = 1, d = 5;
  const uint32_t page = v.page_of(0, pos);
  static_cast<float*>(v.blocks)[v.element_offset(page, 1, layer, pos % 4, head, d)] = 3.25f;
  EXPECT_EQ(cache.get(0, pos, 1, layer, head, d), 3.25f);
  EXPECT_TRUE(cache.set_cache_length(0, 13).ok());
  EXPECT_FALSE(cache.set_cache_length(1, 9).ok()) << "only 8 positions reserved";
}

TEST(PagedKV, ReserveFailsCleanlyWhenPagesRunOut) {
  PagedKVCacheConfig config = small_config();
  config.num_blocks = 10;  // 3 sequences x 4 pages do not fit
  PagedKVCache cache;
  ASSERT_TRUE(PagedKVCache::create(config, 1, &cache).ok());
  ASSERT_TRUE(cache.reserve(0, 16).ok());
  ASSERT_TRUE(cache.reserve(1, 16).ok());
  const Status s = cache.reserve(2, 16);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_EQ(cache.pages_used(2), 0) << "a failed reserve assigns nothing";
  EXPECT_EQ(cache.reserve(0, 17).code(), StatusCode::kOutOfRange);
}

TEST(PagedKV, ValidationNamesTheField) {
  PagedKVCache cache;
  ASSERT_TRUE(PagedKVCache::create(small_config(), 1, &cache).ok());
  PagedKVCacheCollection v = cache.view();
  EXPECT_TRUE(validate_paged_kv(v, "kv").ok());
  auto expect_error = [](PagedKVCacheCollection c, const std::string& needle) {
    const Status s = validate_paged_kv(c, "kv");
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  PagedKVCacheCollection bad = v;
  bad.page_size = 0;
  expect_error(bad, "kv.page_size: expected >= 1, got 0");
  bad = v;
  bad.kv_dim = 3;
  expect_error(bad, "kv.kv_dim");
  bad = v;
  bad.blocks = nullptr;
  expect_error(bad, "kv.blocks");
  bad = v;
  bad.lookup_table.shape[0] = 2;
  expect_error(bad, "kv.lookup_table");
  bad = v;
  bad.scales = cache.raw_scales().data() + 1;
  bad.scale_granularity = 0;
  expect_error(bad, "kv.scale_granularity");
}

TEST(PagedKV, RowOffsetsValidation) {
  const uint32_t good[] = {0, 3, 3, 7};
  EXPECT_TRUE(validate_row_offsets(make_view(good, 4), 3, 7, "offs").ok());
  const uint32_t nonzero_start[] = {1, 3, 3, 7};
  EXPECT_NE(validate_row_offsets(make_view(nonzero_start, 4), 3, 7, "offs")
                .message()
                .find("offs[0] == 0"),
            std::string::npos);
  const uint32_t decreasing[] = {0, 3, 2, 7};
  EXPECT_NE(
      validate_row_offsets(make_view(decreasing, 4), 3, 7, "offs").message().find("non-decreasing"),
      std::string::npos);
  EXPECT_NE(validate_row_offsets(make_view(good, 4), 3, 8, "offs").message().find("offs[B] == 8"),
            std::string::npos);
  EXPECT_NE(validate_row_offsets(make_view(good, 4), 2, 7, "offs").message().find("expected shape"),
            std::string::npos);
  const std::vector<int32_t> seq = row_to_sequence(make_view(good, 4));
  EXPECT_EQ(seq, (std::vector<int32_t>{0, 0, 0, 2, 2, 2, 2}));
}

TEST(PagedKV, RaggedCacheChecksCapacityAndPages) {
  PagedKVCache cache;
  ASSERT_TRUE(PagedKVCache::create(small_config(), 3, &cache).ok());
  ASSERT_TRUE(cache.reserve(0, 6).ok());
  ASSERT_TRUE(cache.set_cache_length(0, 5).ok());
  const uint32_t offs[] = {0, 1, 1, 1};  // one new token in sequence 0 -> positions 0..5
  EXPECT_TRUE(validate_ragged_cache(cache.view(), make_view(offs, 4), true, "k").ok());
  const uint32_t offs_more[] = {0, 4, 4, 4};  // positions 0..8: page 2 is a sentinel
  const Status s = validate_ragged_cache(cache.view(), make_view(offs_more, 4), true, "k");
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("k.lookup_table: sequence 0 page entry 2"), std::string::npos)
      << s.message();
  EXPECT_TRUE(validate_ragged_cache(cache.view(), make_view(offs_more, 4), false, "k").ok());
  const uint32_t offs_over[] = {0, 12, 12, 12};  // 17 positions > 16
  EXPECT_NE(validate_ragged_cache(cache.view(), make_view(offs_over, 4), false, "k")
                .message()
                .find("needs 17"),
            std::string::npos);
}

}  // namespace
}  // namespace quantkv
