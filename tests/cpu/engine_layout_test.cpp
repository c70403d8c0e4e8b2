// The indexer K cache in the engines' layout (vLLM / SGLang / DeepGEMM), global slots and
// int32 views. The indexer's own cases run over both layouts in indexer_test.cpp; here:
//  - the layout itself, built by hand as DeepGEMM's test does (keys of a page, then its
//    scales), read by the indexer with the same indices as the MAX collection;
//  - the K store writing the engine layout: bit for bit what it writes into a MAX collection,
//    nothing else touched (page padding included), every ISA path, f32/bf16, both modes;
//  - store then score in either layout: the same indices;
//  - int32 block tables (with -1 entries) and int32 offsets through as_uint32_view.
#include "quantkv/engine_layout.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "engine_layout_util.hpp"
#include "quantkv/indexer.hpp"
#include "robustness_fixtures.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

// A MAX-layout K cache (kv_dim 1, 2 layers) for `seq_lens` new tokens after `cache_lens`,
// filled with random codes and scales, plus random q, q_s for the indexer.
struct Case {
  int64_t H = 4, D = 64, page_size = 16, top_k = 24;
  std::vector<int64_t> cache_lens, seq_lens;
  uint32_t layer = 1;
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;

  int64_t T() const { return int64_t(offs.back()); }
  void build(TestRng& rng) {
    PagedKVCacheConfig cfg;
    cfg.dtype = DType::kE4M3;
    cfg.kv_dim = 1;
    cfg.num_layers = 2;
    cfg.page_size = page_size;
    cfg.num_heads = 1;
    cfg.head_size = D;
    cfg.scale_granularity = D;
    cfg.num_blocks = 0;
    cache = testing::make_test_cache(cfg, cache_lens, seq_lens, rng.engine()());
    offs = testing::offsets_of(seq_lens);
    for (uint8_t& b : cache.raw_blocks()) b = float_to_e4m3(rng.normal(0, 20));
    for (float& s : cache.raw_scales()) s = rng.uniform_float(0.01f, 2.0f);
    q.resize(std::size_t(T() * H * D));
    for (auto& c : q) c.bits = float_to_e4m3(rng.normal(0, 20));
    q_s.resize(std::size_t(T() * H));
    for (float& w : q_s) w = rng.normal(0.2f, 1.0f);
  }
  TensorView<const float8_e4m3fn, 3> qv() const {
    return make_view<const float8_e4m3fn>(q.data(), T(), H, D);
  }
  TensorView<const float, 2> qsv() const { return make_view<const float>(q_s.data(), T(), H); }
  TensorView<const uint32_t, 1> offv() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
};

std::vector<int32_t> run_max(const Case& c, IndexOutput output = IndexOutput::kPositions) {
  std::vector<int32_t> out(std::size_t(c.T() * c.top_k));
  testing::poison(out);
  PagedKVCache& cache = const_cast<PagedKVCache&>(c.cache);
  const Status st = mla_indexer_ragged_float8_paged(
      make_view(out.data(), c.T(), c.top_k), c.qv(), c.qsv(), c.offv(), cache.view(), c.layer,
      MaskType::kCausal, Context{}, IndexerOptions{output, nullptr});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<int32_t> run_engine(const Case& c, const EngineIndexerKCache& k_cache,
                                TensorView<const uint32_t, 1> offs,
                                IndexOutput output = IndexOutput::kPositions) {
  std::vector<int32_t> out(std::size_t(c.T() * c.top_k));
  testing::poison(out);
  const Status st = mla_indexer_ragged_float8_paged(make_view(out.data(), c.T(), c.top_k), c.qv(),
                                                    c.qsv(), offs, k_cache, MaskType::kCausal,
                                                    Context{}, IndexerOptions{output, nullptr});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// DeepGEMM's kv_cache_cast_to_fp8 arrangement, written out independently of the library's
// offsets: uint8 [num_blocks, P * (D + 4)], page p = P key rows of D bytes, then P floats.
TEST(EngineLayout, HandBuiltDeepGemmBufferGivesTheMaxIndices) {
  TestRng rng;
  Case c;
  c.cache_lens = {70, 0, 33};
  c.seq_lens = {3, 20, 1};
  c.build(rng);
  const PagedKVCacheCollection v = c.cache.view();
  const int64_t P = c.page_size, D = c.D, page_bytes = P * (D + 4);
  std::vector<float> storage(std::size_t(v.num_blocks * page_bytes / 4));
  auto* bytes = reinterpret_cast<uint8_t*>(storage.data());
  for (int64_t p = 0; p < v.num_blocks; ++p) {
    for (int64_t s = 0; s < P; ++s) {
      for (int64_t d = 0; d < D; ++d) {
        bytes[p * page_bytes + s * D + d] =
            static_cast<const uint8_t*>(v.blocks)[((p * 2 + c.layer) * P + s) * D + d];
      }
      std::memcpy(bytes + p * page_bytes + P * D + 4 * s, &v.scales[(p * 2 + c.layer) * P + s], 4);
    }
  }
  EngineIndexerKCache k;
  k.data = bytes;
  k.num_blocks = v.num_blocks;
  k.page_size = P;
  k.head_size = D;
  k.cache_lengths = v.cache_lengths;
  k.lookup_table = v.lookup_table;
  const std::vector<int32_t> expected = run_max(c);
  testing::for_each_isa([&](IsaLevel) { EXPECT_EQ(run_engine(c, k, c.offv()), expected); });
  EXPECT_EQ(run_engine(c, k, c.offv(), IndexOutput::kGlobalSlots),
            run_max(c, IndexOutput::kGlobalSlots));
}

// Block tables and offsets as engines pass them: int32, unused table entries -1.
TEST(EngineLayout, Int32BlockTableAndOffsetsGiveTheSameIndices) {
  TestRng rng;
  Case c;
  c.cache_lens = {5, 40, 0};
  c.seq_lens = {2, 1, 17};
  c.build(rng);
  const PagedKVCacheCollection v = c.cache.view();
  std::vector<int32_t> table(v.lookup_table.data, v.lookup_table.data + v.lookup_table.numel());
  for (int32_t& e : table) {
    if (int64_t(uint32_t(e)) >= v.num_blocks) e = -1;  // the library's sentinel -> the engines' -1
  }
  const std::vector<int32_t> offs(c.offs.begin(), c.offs.end());
  testing::EngineCopy e = testing::make_engine_copy(v, c.layer);
  e.view.lookup_table = as_uint32_view(
      make_view<const int32_t>(table.data(), v.lookup_table.shape[0], v.lookup_table.shape[1]));
  const auto offs32 = as_uint32_view(make_view<const int32_t>(offs.data(), int64_t(offs.size())));
  EXPECT_EQ(run_engine(c, e.view, offs32), run_max(c));
  EXPECT_EQ(run_engine(c, e.view, offs32, IndexOutput::kGlobalSlots),
            run_max(c, IndexOutput::kGlobalSlots));
}

// The K store into the engine layout writes exactly what it writes into the MAX collection,
// at the same page and slot, and nothing else (the rest of the buffer, page padding included,
// is unchanged).
template <typename Elem>
void check_store_matches(int64_t page_size, int64_t pad_bytes, ScaleMode mode, bool strided) {
  SCOPED_TRACE("page " + std::to_string(page_size) + " pad " + std::to_string(pad_bytes) +
               " mode " + std::to_string(int(mode)) + (strided ? " strided" : ""));
  TestRng rng;
  Case c;
  c.D = 48;
  c.page_size = page_size;
  c.cache_lens = {3, 0, 17, 64};
  c.seq_lens = {5, 0, 16, 1};
  c.build(rng);
  const int64_t T = c.T(), D = c.D, col = strided ? 2 : 1;
  std::vector<Elem> k(std::size_t(T * D * col));
  for (Elem& x : k) {
    const float f = rng.normal(0, 3);
    if constexpr (std::is_same_v<Elem, float>)
      x = f;
    else
      x.bits = float_to_bf16(f);
  }
  TensorView<const Elem, 2> kv{k.data(), {T, D}, {D * col, col}};
  testing::for_each_isa([&](IsaLevel) {
    PagedKVCache max_cache = c.cache;
    testing::EngineCopy engine = testing::make_engine_copy(max_cache.view(), c.layer, pad_bytes);
    const std::vector<float> before = engine.storage;
    ASSERT_TRUE(indexer_k_store(kv, c.offv(), max_cache.view(), c.layer, mode, Context{}).ok());
    const Status st = indexer_k_store(kv, c.offv(), engine.view, mode, Context{});
    ASSERT_TRUE(st.ok()) << st.to_string();
    const testing::EngineCopy expected =
        testing::make_engine_copy(max_cache.view(), c.layer, pad_bytes);
    ASSERT_EQ(
        0, std::memcmp(engine.storage.data(), expected.storage.data(), expected.storage.size() * 4))
        << "the engine buffer differs from the MAX cache's layer after the same store";
    ASSERT_NE(0, std::memcmp(engine.storage.data(), before.data(), before.size() * 4))
        << "nothing stored";
  });
}

TEST(EngineLayout, KStoreWritesWhatItWritesIntoTheMaxCollection) {
  for (int64_t page : {1, 16, 64}) {
    for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
      check_store_matches<float>(page, page == 16 ? 8 : 0, mode, false);
      check_store_matches<bfloat16>(page, page == 1 ? 4 : 0, mode, page == 64);
    }
  }
  check_store_matches<float>(16, 0, ScaleMode::kPowerOfTwo, true);
}

// The pipeline an engine runs: store the new keys, then score them, in either layout.
TEST(EngineLayout, StoreThenScoreGivesTheSameIndicesInBothLayouts) {
  TestRng rng;
  Case c;
  c.H = 8;
  c.D = 128;
  c.page_size = 64;
  c.top_k = 100;
  c.cache_lens = {200, 0, 63};
  c.seq_lens = {4, 130, 1};
  c.build(rng);
  std::vector<float> k(std::size_t(c.T() * c.D));
  for (float& x : k) x = rng.normal(0, 2);
  testing::EngineCopy engine = testing::make_engine_copy(c.cache.view(), c.layer, 64);
  const auto kv = make_view<const float>(k.data(), c.T(), c.D);
  ASSERT_TRUE(
      indexer_k_store(kv, c.offv(), c.cache.view(), c.layer, ScaleMode::kPowerOfTwo, Context{})
          .ok());
  ASSERT_TRUE(indexer_k_store(kv, c.offv(), engine.view, ScaleMode::kPowerOfTwo, Context{}).ok());
  testing::for_each_isa([&](IsaLevel) {
    EXPECT_EQ(run_engine(c, engine.view, c.offv()), run_max(c));
    EXPECT_EQ(run_engine(c, engine.view, c.offv(), IndexOutput::kGlobalSlots),
              run_max(c, IndexOutput::kGlobalSlots));
  });
}

TEST(EngineLayout, NamesOfTheIndexOutputs) {
  EXPECT_STREQ(index_output_name(IndexOutput::kPositions), "positions");
  EXPECT_STREQ(index_output_name(IndexOutput::kGlobalSlots), "global_slots");
  EXPECT_STREQ(index_output_name(IndexOutput(9)), "unknown");
}

}  // namespace
}  // namespace quantkv
