// The indexer K cache in the engines' layout (vLLM / SGLang / DeepGEMM), global slots and
// int32 views. The indexer's own cases run over both layouts in indexer_test.cpp; here:
//  - the layout itself, built by hand as DeepGEMM's test does (keys of a page, then its
//    scales), read by the indexer with the same indices as the MAX collection;
//  - the K store writing the engine layout: bit for bit what it writes into a MAX collection,
//    nothing else touched (page padding included), every ISA path, f32/bf16, both modes;
//  - store then score in either layout: the same indices;
//  - int32 block tables (with -1 entries) and int32 offsets through as_uint32_view;
//  - the one-call forms (IndexerKStoreArgs, IndexerQPrepareArgs, MlaIndexerArgs): the engine
//    layout with DeepSeek-V3.2's front end writes what the MAX form writes, bf16 queries
//    without a front end quantise as their fp32 values do, the same indices as the fixed forms,
//    and the "exactly one of" errors.
#include "quantkv/engine_layout.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
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

// The front end over the engine layout (a one-call combination the fixed forms lack): the same
// bytes as over the MAX collection, which indexer_front_end_test.cpp checks against the fp64
// reference; every ISA path; fp32 and bf16 keys; with and without position ids.
TEST(IndexerOneCall, EngineLayoutWithTheFrontEndWritesWhatTheMaxFormWrites) {
  TestRng rng;
  Case c;
  c.D = 64;
  c.cache_lens = {3, 0, 17, 40};
  c.seq_lens = {5, 0, 16, 1};
  c.build(rng);
  const int64_t T = c.T(), D = c.D, kMaxPos = 64, kRopeDim = 32;
  std::vector<float> freqs(std::size_t(kMaxPos * kRopeDim));
  ASSERT_TRUE(make_freqs_cis(make_view(freqs.data(), kMaxPos, kRopeDim), 10000.0).ok());
  std::vector<uint32_t> positions;
  for (std::size_t b = 0; b < c.seq_lens.size(); ++b) {
    for (int64_t i = 0; i < c.seq_lens[b]; ++i) positions.push_back(uint32_t(c.cache_lens[b] + i));
  }
  std::vector<float> k32(std::size_t(T * D));
  std::vector<bfloat16> k16(k32.size());
  for (std::size_t i = 0; i < k32.size(); ++i) {
    k16[i].bits = float_to_bf16(rng.normal(0, 3));
    k32[i] = rng.normal(0, 3);
  }
  for (bool bf16 : {false, true}) {
    for (bool with_positions : {false, true}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + (with_positions ? " position_ids" : ""));
      const IndexerFrontEnd fe =
          deepseek_v32_front_end(make_view<const float>(freqs.data(), kMaxPos, kRopeDim),
                                 with_positions ? make_view<const uint32_t>(positions.data(), T)
                                                : TensorView<const uint32_t, 1>{});
      testing::for_each_isa([&](IsaLevel) {
        PagedKVCache max_cache = c.cache;
        testing::EngineCopy engine = testing::make_engine_copy(max_cache.view(), c.layer, 8);
        const std::vector<float> before = engine.storage;
        const PagedKVCacheCollection collection = max_cache.view();
        IndexerKStoreArgs a;
        if (bf16) {
          a.k_bf16 = make_view<const bfloat16>(k16.data(), T, D);
        } else {
          a.k = make_view<const float>(k32.data(), T, D);
        }
        a.input_row_offsets = c.offv();
        a.front_end = &fe;
        a.k_collection = &collection;
        a.layer_idx = c.layer;
        Status st = indexer_k_store(a, Context{});
        ASSERT_TRUE(st.ok()) << st.to_string();
        a.k_collection = nullptr;
        a.k_cache = &engine.view;
        st = indexer_k_store(a, Context{});
        ASSERT_TRUE(st.ok()) << st.to_string();
        const testing::EngineCopy expected =
            testing::make_engine_copy(max_cache.view(), c.layer, 8);
        ASSERT_EQ(0, std::memcmp(engine.storage.data(), expected.storage.data(),
                                 expected.storage.size() * 4))
            << "the engine buffer differs from the MAX cache's layer after the same store";
        ASSERT_NE(0, std::memcmp(engine.storage.data(), before.data(), before.size() * 4))
            << "nothing stored";
      });
    }
  }
}

// bf16 queries without a front end: the bytes of their fp32 values through the fp32 path.
TEST(IndexerOneCall, Bf16QueriesWithoutFrontEndQuantiseAsTheirFloatValues) {
  TestRng rng;
  const int64_t T = 7, H = 3, D = 48;
  std::vector<bfloat16> q16(std::size_t(T * H * D));
  std::vector<float> q32(q16.size()), w(std::size_t(T * H));
  for (std::size_t i = 0; i < q16.size(); ++i) {
    q16[i].bits = float_to_bf16(rng.normal(0, 2));
    q32[i] = bf16_to_float(q16[i].bits);
  }
  for (float& x : w) x = rng.normal();
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    testing::for_each_isa([&](IsaLevel) {
      std::vector<float8_e4m3fn> want(q16.size()), got(q16.size());
      std::vector<float> want_s(w.size()), got_s(w.size());
      testing::poison(got);
      testing::poison(got_s);
      ASSERT_TRUE(indexer_q_prepare(make_view<const float>(q32.data(), T, H, D),
                                    make_view<const float>(w.data(), T, H),
                                    make_view(want.data(), T, H, D), make_view(want_s.data(), T, H),
                                    mode, Context{})
                      .ok());
      IndexerQPrepareArgs a;
      a.q_bf16 = make_view<const bfloat16>(q16.data(), T, H, D);
      a.weights = make_view<const float>(w.data(), T, H);
      a.q_fp8 = make_view(got.data(), T, H, D);
      a.q_s = make_view(got_s.data(), T, H);
      a.scale_mode = mode;
      const Status st = indexer_q_prepare(a, Context{});
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size()));
      ASSERT_EQ(0, std::memcmp(got_s.data(), want_s.data(), want_s.size() * sizeof(float)));
    });
  }
}

TEST(IndexerOneCall, SameIndicesAsTheFixedFormsInBothLayouts) {
  TestRng rng;
  Case c;
  c.cache_lens = {7, 0, 40};
  c.seq_lens = {3, 4, 9};
  c.build(rng);
  testing::EngineCopy engine = testing::make_engine_copy(c.cache.view(), c.layer);
  const PagedKVCacheCollection collection = const_cast<PagedKVCache&>(c.cache).view();
  for (IndexOutput output : {IndexOutput::kPositions, IndexOutput::kGlobalSlots}) {
    for (bool max : {true, false}) {
      std::vector<int32_t> got(std::size_t(c.T() * c.top_k));
      testing::poison(got);
      IndexerTimings timings;
      MlaIndexerArgs a;
      a.output_indices = make_view(got.data(), c.T(), c.top_k);
      a.q = c.qv();
      a.q_s = c.qsv();
      a.input_row_offsets = c.offv();
      if (max) {
        a.k_collection = &collection;
        a.layer_idx = c.layer;
      } else {
        a.k_cache = &engine.view;
      }
      a.output = output;
      a.timings = &timings;
      const Status st = mla_indexer(a, Context{});
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(got, max ? run_max(c, output) : run_engine(c, engine.view, c.offv(), output));
      EXPECT_GT(timings.workspace_bytes, 0);
    }
  }
}

TEST(IndexerOneCall, ExactlyOneOfEachAlternativeIsNamed) {
  TestRng rng;
  Case c;
  c.cache_lens = {2};
  c.seq_lens = {3};
  c.build(rng);
  const PagedKVCacheCollection collection = c.cache.view();
  testing::EngineCopy engine = testing::make_engine_copy(collection, c.layer);
  std::vector<float> k32(std::size_t(c.T() * c.D), 1.0f);
  std::vector<bfloat16> k16(k32.size());
  auto message = [](const Status& st) { return st.ok() ? std::string("ok") : st.to_string(); };
  IndexerKStoreArgs s;
  s.input_row_offsets = c.offv();
  s.k_collection = &collection;
  EXPECT_NE(message(indexer_k_store(s, Context{})).find("k, k_bf16: expected exactly one"),
            std::string::npos);
  s.k = make_view<const float>(k32.data(), c.T(), c.D);
  s.k_bf16 = make_view<const bfloat16>(k16.data(), c.T(), c.D);
  EXPECT_NE(message(indexer_k_store(s, Context{})).find("got both"), std::string::npos);
  s.k_bf16 = {};
  s.k_cache = &engine.view;
  EXPECT_NE(message(indexer_k_store(s, Context{})).find("k_collection, k_cache: expected exactly"),
            std::string::npos);
  s.k_cache = nullptr;
  s.k_collection = nullptr;
  EXPECT_NE(message(indexer_k_store(s, Context{})).find("got neither"), std::string::npos);

  IndexerQPrepareArgs p;
  EXPECT_NE(message(indexer_q_prepare(p, Context{})).find("q, q_bf16: expected exactly one"),
            std::string::npos);

  std::vector<int32_t> out(std::size_t(c.T() * c.top_k));
  MlaIndexerArgs m;
  m.output_indices = make_view(out.data(), c.T(), c.top_k);
  m.q = c.qv();
  m.q_s = c.qsv();
  m.input_row_offsets = c.offv();
  EXPECT_NE(message(mla_indexer(m, Context{})).find("k_collection, k_cache: expected exactly one"),
            std::string::npos);
}

}  // namespace
}  // namespace quantkv
