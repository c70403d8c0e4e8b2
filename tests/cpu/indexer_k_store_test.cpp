// Indexer K store and Q prepare (contract §5) against the reference quantisation (frexp/ldexp
// based, independent of the library's bit manipulation), for f32 and bf16 inputs and both
// scale modes; only the new tokens' slots change; bad input writes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "quantkv/indexer.hpp"
#include "reference/indexer_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

struct StoreSetup {
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<int64_t> seq_lens, cache_lens;
  int64_t D = 0, T = 0;
};

StoreSetup make_store(TestRng& rng, int64_t D, int64_t page_size, std::vector<int64_t> seq_lens,
                      std::vector<int64_t> cache_lens, int64_t kv_dim) {
  StoreSetup s;
  s.D = D;
  s.seq_lens = seq_lens;
  s.cache_lens = cache_lens;
  PagedKVCacheConfig cfg;
  cfg.dtype = DType::kE4M3;
  cfg.kv_dim = kv_dim;
  cfg.num_layers = 3;
  cfg.page_size = page_size;
  cfg.num_heads = 1;
  cfg.head_size = D;
  cfg.scale_granularity = D;
  cfg.batch_size = int64_t(seq_lens.size());
  int64_t pages = 1, max_pages = 1;
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    const int64_t need = (seq_lens[b] + cache_lens[b] + page_size - 1) / page_size;
    pages += need;
    max_pages = std::max(max_pages, need);
  }
  cfg.num_blocks = pages;
  cfg.max_pages_per_seq = max_pages;
  EXPECT_TRUE(PagedKVCache::create(cfg, rng.engine()(), &s.cache).ok());
  s.offs.push_back(0);
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    EXPECT_TRUE(s.cache.reserve(int64_t(b), seq_lens[b] + cache_lens[b]).ok());
    EXPECT_TRUE(s.cache.set_cache_length(int64_t(b), cache_lens[b]).ok());
    s.offs.push_back(s.offs.back() + uint32_t(seq_lens[b]));
  }
  s.T = s.offs.back();
  for (uint8_t& byte : s.cache.raw_blocks()) byte = uint8_t(rng.uniform_int(0, 255));
  for (float& x : s.cache.raw_scales()) x = rng.uniform_float(1, 2);
  return s;
}

// Expected cache after storing rows x [T, D] (as floats) into layer `layer`.
void expect_stored(StoreSetup& s, const std::vector<float>& x, uint32_t layer, ScaleMode mode,
                   const std::vector<uint8_t>& blocks_before,
                   const std::vector<float>& scales_before) {
  std::vector<uint8_t> blocks = blocks_before;
  std::vector<float> scales = scales_before;
  const PagedKVCacheCollection v = s.cache.view();
  for (std::size_t b = 0; b + 1 < s.offs.size(); ++b) {
    for (int64_t i = 0; i < s.seq_lens[b]; ++i) {
      const int64_t t = s.offs[b] + i, pos = s.cache_lens[b] + i;
      const int64_t page = v.page_of(int64_t(b), pos), slot = pos % v.page_size;
      scales[v.scale_offset(page, 0, layer, slot, 0, 0)] = reference::quantize_row_reference(
          x.data() + t * s.D, s.D, mode,
          blocks.data() + v.element_offset(page, 0, layer, slot, 0, 0));
    }
  }
  EXPECT_EQ(s.cache.raw_blocks(), blocks);
  ASSERT_EQ(s.cache.raw_scales().size(), scales.size());
  EXPECT_EQ(0, std::memcmp(s.cache.raw_scales().data(), scales.data(), scales.size() * 4));
}

TEST(IndexerKStore, F32AndBf16RowsInBothScaleModes) {
  TestRng rng;
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    for (int64_t page : {1, 16, 64}) {
      SCOPED_TRACE("mode " + std::to_string(int(mode)) + " page " + std::to_string(page));
      StoreSetup s =
          make_store(rng, 128, page, {6, 1, 0, 4}, {128, 63, 5, 200}, page == 16 ? 2 : 1);
      std::vector<float> x(static_cast<std::size_t>(s.T * s.D));
      for (float& v : x) v = rng.normal(0, rng.uniform_int(0, 1) ? 0.01f : 30.0f);
      for (int64_t d = 0; d < s.D; ++d) x[d] = 0.0f;  // an all-zero row: amax floor 1e-4
      x[s.D + 3] = std::numeric_limits<float>::quiet_NaN();
      x[2 * s.D + 5] = 1e6f;  // saturates nothing: the scale follows amax
      const std::vector<uint8_t> blocks = s.cache.raw_blocks();
      const std::vector<float> scales = s.cache.raw_scales();
      Context ctx;
      ctx.num_threads = 2;
      ASSERT_TRUE(indexer_k_store(make_view<const float>(x.data(), s.T, s.D),
                                  make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size())),
                                  s.cache.view(), 2, mode, ctx)
                      .ok());
      expect_stored(s, x, 2, mode, blocks, scales);

      // bf16 input: the same as its float values.
      std::vector<bfloat16> xb(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) xb[i].bits = float_to_bf16(x[i]);
      std::vector<float> xf(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(xb[i].bits);
      const std::vector<uint8_t> blocks2 = s.cache.raw_blocks();
      const std::vector<float> scales2 = s.cache.raw_scales();
      ASSERT_TRUE(indexer_k_store(make_view<const bfloat16>(xb.data(), s.T, s.D),
                                  make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size())),
                                  s.cache.view(), 0, mode, ctx)
                      .ok());
      expect_stored(s, xf, 0, mode, blocks2, scales2);
    }
  }
}

// Every ISA path writes the scalar path's bits, also for rows full of NaN, inf, signed zeros,
// subnormals and huge values, and for D not a multiple of the vector width.
TEST(IndexerKStore, EveryIsaPathEqualsScalarOnExtremes) {
  TestRng rng;
  for (int64_t D : {1, 7, 16, 33, 128}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    StoreSetup s = make_store(rng, D, 16, {5, 0, 3}, {7, 2, 30}, 1);
    std::vector<float> x(static_cast<std::size_t>(s.T * s.D));
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              0.0f,
                              -0.0f,
                              1e-41f,
                              -3e38f,
                              std::numeric_limits<float>::min()};
    for (float& v : x) {
      v = rng.normal(0, std::exp2(float(rng.uniform_int(-30, 30))));
      if (rng.uniform_int(0, 7) == 0) v = specials[rng.uniform_int(0, 7)];
    }
    std::vector<bfloat16> xb(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xb[i].bits = float_to_bf16(x[i]);
    const std::vector<uint8_t> blocks0 = s.cache.raw_blocks();
    const std::vector<float> scales0 = s.cache.raw_scales();
    const auto offs = make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size()));
    for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
      for (bool bf16 : {false, true}) {
        auto run = [&] {
          s.cache.raw_blocks() = blocks0;
          s.cache.raw_scales() = scales0;
          const Status st = bf16 ? indexer_k_store(make_view<const bfloat16>(xb.data(), s.T, s.D),
                                                   offs, s.cache.view(), 1, mode, Context{})
                                 : indexer_k_store(make_view<const float>(x.data(), s.T, s.D), offs,
                                                   s.cache.view(), 1, mode, Context{});
          EXPECT_TRUE(st.ok()) << st.to_string();
        };
        std::vector<uint8_t> want_blocks;
        std::vector<float> want_scales;
        {
          testing::ScopedIsa scalar(IsaLevel::kScalar);
          run();
          want_blocks = s.cache.raw_blocks();
          want_scales = s.cache.raw_scales();
        }
        testing::for_each_isa([&](IsaLevel) {
          run();
          EXPECT_TRUE(s.cache.raw_blocks() == want_blocks)
              << "bf16=" << bf16 << " mode=" << int(mode);
          ASSERT_EQ(s.cache.raw_scales().size(), want_scales.size());
          EXPECT_EQ(0, std::memcmp(s.cache.raw_scales().data(), want_scales.data(),
                                   want_scales.size() * 4));
        });
      }
    }
  }
}

TEST(IndexerKStore, ScalesFollowTheSpec) {
  TestRng rng;
  StoreSetup s = make_store(rng, 64, 16, {50}, {0}, 1);
  std::vector<float> x(static_cast<std::size_t>(s.T * s.D));
  for (float& v : x) v = rng.normal(0, rng.uniform_float(0.001f, 100.0f));
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    ASSERT_TRUE(indexer_k_store(make_view<const float>(x.data(), s.T, s.D),
                                make_view<const uint32_t>(s.offs.data(), int64_t(2)),
                                s.cache.view(), 1, mode, Context{})
                    .ok());
    for (int64_t t = 0; t < s.T; ++t) {
      float amax = 1e-4f;
      for (int64_t d = 0; d < s.D; ++d) amax = std::max(amax, std::fabs(x[t * s.D + d]));
      const float sc = s.cache.get_scale(0, t, 0, 1, 0, 0);
      if (mode == ScaleMode::kFloat) {
        // DeepSeek multiplies by 1/448: at most one ulp from the division.
        EXPECT_LE(std::fabs(sc - amax * (1.0f / 448.0f)), std::nextafter(sc, INFINITY) - sc) << t;
      } else {
        int e;
        EXPECT_EQ(std::frexp(sc, &e), 0.5f) << "power of two, token " << t;
        EXPECT_GE(sc, amax / 448.0f);
        EXPECT_LT(sc, 2 * (amax / 448.0f));
      }
    }
  }
}

TEST(IndexerKStore, BadInputWritesNothing) {
  TestRng rng;
  StoreSetup s = make_store(rng, 64, 16, {3, 2}, {10, 20}, 1);
  std::vector<float> x(static_cast<std::size_t>(s.T * s.D), 1.0f);
  const std::vector<uint8_t> blocks = s.cache.raw_blocks();
  std::vector<uint32_t> table = s.cache.raw_lookup_table();
  struct Case {
    const char* name;
    StatusCode code;
    const char* names;
  };
  auto run = [&](const Case& c, auto mutate) {
    SCOPED_TRACE(c.name);
    auto k = make_view<const float>(x.data(), s.T, s.D);
    auto offs = make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size()));
    PagedKVCacheCollection cache = s.cache.view();
    uint32_t layer = 0;
    ScaleMode mode = ScaleMode::kPowerOfTwo;
    mutate(k, offs, cache, layer, mode);
    const Status st = indexer_k_store(k, offs, cache, layer, mode, Context{});
    EXPECT_EQ(st.code(), c.code) << st.to_string();
    EXPECT_NE(st.message().find(c.names), std::string::npos) << st.message();
    EXPECT_EQ(s.cache.raw_blocks(), blocks);
  };
  using K = TensorView<const float, 2>;
  using F = TensorView<const uint32_t, 1>;
  using C = PagedKVCacheCollection;
  run({"D", StatusCode::kInvalidArgument, "k:"},
      [](K& k, F&, C&, uint32_t&, ScaleMode&) { k.shape[1] = 32; });
  run({"rows", StatusCode::kInvalidArgument, "input_row_offsets"},
      [](K& k, F&, C&, uint32_t&, ScaleMode&) { k.shape[0] = 4; });
  run({"dtype", StatusCode::kInvalidArgument, "k_collection.dtype"},
      [](K&, F&, C& c, uint32_t&, ScaleMode&) { c.dtype = DType::kF16; });
  run({"heads", StatusCode::kInvalidArgument, "k_collection.num_heads"},
      [](K&, F&, C& c, uint32_t&, ScaleMode&) { c.num_heads = 2; });
  run({"scales", StatusCode::kInvalidArgument, "k_collection.scales"},
      [](K&, F&, C& c, uint32_t&, ScaleMode&) {
        c.scales = nullptr;
        c.scale_granularity = 0;
      });
  run({"granularity", StatusCode::kInvalidArgument, "k_collection.scale_granularity"},
      [](K&, F&, C& c, uint32_t&, ScaleMode&) { c.scale_granularity = 16; });
  run({"layer", StatusCode::kOutOfRange, "layer_idx"},
      [](K&, F&, C&, uint32_t& l, ScaleMode&) { l = 3; });
  run({"mode", StatusCode::kInvalidArgument, "scale_mode"},
      [](K&, F&, C&, uint32_t&, ScaleMode& m) { m = ScaleMode(9); });
  run({"page", StatusCode::kOutOfRange, "k_collection.lookup_table"},
      [&](K&, F&, C& c, uint32_t&, ScaleMode&) {
        table[c.max_pages_per_seq() + 1] = uint32_t(c.num_blocks);  // sequence 1, positions 16..22
        c.lookup_table.data = table.data();
      });
}

TEST(IndexerQPrepare, MatchesReferenceInBothModes) {
  TestRng rng;
  const int64_t T = 5, H = 6, D = 64;
  std::vector<float> q(static_cast<std::size_t>(T * H * D)), w(static_cast<std::size_t>(T * H));
  for (float& v : q) v = rng.normal(0, rng.uniform_float(0.01f, 50.0f));
  for (float& v : w) v = rng.normal(0, 2);
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    std::vector<float8_e4m3fn> q8(q.size());
    std::vector<float> qs(w.size());
    testing::poison(q8);
    testing::poison(qs);
    ASSERT_TRUE(indexer_q_prepare(make_view<const float>(q.data(), T, H, D),
                                  make_view<const float>(w.data(), T, H),
                                  make_view(q8.data(), T, H, D), make_view(qs.data(), T, H), mode,
                                  Context{})
                    .ok());
    const float hf = float(1.0 / std::sqrt(double(H))), df = float(1.0 / std::sqrt(double(D)));
    std::vector<uint8_t> codes(static_cast<std::size_t>(D));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const float s =
            reference::quantize_row_reference(q.data() + (t * H + h) * D, D, mode, codes.data());
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(q8[(t * H + h) * D + d].bits, codes[d]) << t << "," << h << "," << d;
        const float expected = ((w[t * H + h] * hf) * s) * df;
        ASSERT_EQ(0, std::memcmp(&qs[t * H + h], &expected, 4))
            << qs[t * H + h] << " vs " << expected;
      }
    }
  }
  std::vector<float8_e4m3fn> q8(q.size());
  std::vector<float> qs(w.size());
  const Status bad = indexer_q_prepare(
      make_view<const float>(q.data(), T, H, D), make_view<const float>(w.data(), T, H - 1),
      make_view(q8.data(), T, H, D), make_view(qs.data(), T, H), ScaleMode::kFloat, Context{});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("weights"), std::string::npos) << bad.message();
}

// End to end: Q prepare, K store, then the indexer finds a planted key (aligned with every
// query head, with positive head weights) first for every token, on every ISA path.
TEST(IndexerPipeline, PreparedQueriesFindAPlantedStoredKey) {
  TestRng rng;
  const int64_t H = 4, D = 64, cached = 100, T = 3, planted = 37;
  StoreSetup s = make_store(rng, D, 16, {cached + T}, {0}, 1);
  std::vector<float> k(static_cast<std::size_t>((cached + T) * D)),
      q(static_cast<std::size_t>(T * H * D));
  for (float& v : k) v = rng.normal(0, 1);
  for (float& v : q) v = rng.normal(0, 1);
  for (int64_t d = 0; d < D; ++d) {
    float sum = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) sum += q[(t * H + h) * D + d];
    k[planted * D + d] = 4.0f * sum;
  }
  std::vector<float> w(static_cast<std::size_t>(T * H));
  for (float& v : w) v = rng.uniform_float(0.5f, 1.5f);
  // Store all rows as one prefill, then pretend the first `cached` were cached before.
  ASSERT_TRUE(indexer_k_store(make_view<const float>(k.data(), cached + T, D),
                              make_view<const uint32_t>(s.offs.data(), int64_t(2)), s.cache.view(),
                              0, ScaleMode::kPowerOfTwo, Context{})
                  .ok());
  ASSERT_TRUE(s.cache.set_cache_length(0, cached).ok());
  std::vector<float8_e4m3fn> q8(q.size());
  std::vector<float> qs(w.size());
  ASSERT_TRUE(indexer_q_prepare(make_view<const float>(q.data(), T, H, D),
                                make_view<const float>(w.data(), T, H),
                                make_view(q8.data(), T, H, D), make_view(qs.data(), T, H),
                                ScaleMode::kPowerOfTwo, Context{})
                  .ok());
  const std::vector<uint32_t> offs = {0, uint32_t(T)};
  testing::for_each_isa([&](IsaLevel) {
    std::vector<int32_t> out(static_cast<std::size_t>(T * 8));
    testing::poison(out);
    ASSERT_TRUE(mla_indexer_ragged_float8_paged(make_view(out.data(), T, int64_t(8)),
                                                make_view<const float8_e4m3fn>(q8.data(), T, H, D),
                                                make_view<const float>(qs.data(), T, H),
                                                make_view<const uint32_t>(offs.data(), int64_t(2)),
                                                s.cache.view(), 0, MaskType::kCausal, Context{})
                    .ok());
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(out[t * 8], planted) << "token " << t;
  });
}

}  // namespace
}  // namespace quantkv
