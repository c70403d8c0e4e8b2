// fused_qk_rope_ragged against the fp64 reference: every cache dtype (bf16, fp16, f32, e4m3 with
// and without scales), both pair layouts, trailing and leading rope parts, partial rope, explicit
// position ids, ragged batches with cache_len > 0, empty sequences and shuffled pages. Every ISA
// path writes the scalar path's bytes; nothing but the new tokens' rope parts of K changes; bad
// input writes nothing.
#include "quantkv/rope.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "reference/rope_reference.hpp"
#include "robustness_fixtures.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

struct RopeCase {
  DType dtype = DType::kBF16;
  int64_t scale_granularity = 0;  // e4m3 only: 0 = no scales
  RopeLayout layout = RopeLayout::kInterleaved;
  RopePlacement placement = RopePlacement::kTrailing;
  int64_t D = 64, rope_dim = 64, Hq = 3, Hk = 2, page_size = 4;
  std::vector<int64_t> seq_lens{3, 0, 6}, cache_lens{2, 5, 7};
  bool position_ids = false;
};

std::string describe(const RopeCase& c) {
  return std::string(dtype_name(c.dtype)) + " gran " + std::to_string(c.scale_granularity) + " " +
         rope_layout_name(c.layout) + " " + rope_placement_name(c.placement) + " D " +
         std::to_string(c.D) + " rope_dim " + std::to_string(c.rope_dim) +
         (c.position_ids ? " position_ids" : "");
}

// A cache with random contents (finite values), the batch's offsets, freqs_cis, positions.
struct RopeSetup {
  PagedKVCache cache;
  std::vector<uint32_t> offs;
  std::vector<float> freqs;  // [max_seq_len, rope_dim]
  std::vector<uint32_t> positions;
  int64_t T = 0, max_seq_len = 0;
  RopeOptions options(const RopeCase& c) const {
    RopeOptions o;
    o.freqs_cis = make_view(freqs.data(), max_seq_len, c.rope_dim);
    if (c.position_ids) o.position_ids = make_view(positions.data(), T);
    o.layout = c.layout;
    o.placement = c.placement;
    return o;
  }
};

RopeSetup make_setup(TestRng& rng, const RopeCase& c) {
  RopeSetup s;
  PagedKVCacheConfig cfg;
  cfg.dtype = c.dtype;
  cfg.kv_dim = 2;
  cfg.num_layers = 2;
  cfg.page_size = c.page_size;
  cfg.num_heads = c.Hk;
  cfg.head_size = c.D;
  cfg.scale_granularity = c.scale_granularity;
  s.cache = testing::make_test_cache(cfg, c.cache_lens, c.seq_lens, rng.engine()());
  s.offs = testing::offsets_of(c.seq_lens);
  for (size_t b = 0; b < c.seq_lens.size(); ++b)
    s.max_seq_len = std::max(s.max_seq_len, c.seq_lens[b] + c.cache_lens[b]);
  s.T = s.offs.back();
  s.max_seq_len += 5;
  auto& blocks = s.cache.raw_blocks();
  const int64_t n = int64_t(blocks.size() / dtype_size(c.dtype));
  for (int64_t i = 0; i < n; ++i)
    store_from_float(blocks.data(), c.dtype, i, rng.normal(0.0f, 3.0f));
  for (float& x : s.cache.raw_scales()) x = rng.uniform_float(0.25f, 2.0f);
  s.freqs.resize(size_t(s.max_seq_len * c.rope_dim));
  EXPECT_TRUE(make_freqs_cis(make_view(s.freqs.data(), s.max_seq_len, c.rope_dim), 10000.0).ok());
  for (int64_t t = 0; t < s.T; ++t)
    s.positions.push_back(uint32_t(rng.uniform_int(0, s.max_seq_len - 1)));
  return s;
}

// Relative half-ulp of the dtype and the absolute floor of its subnormals.
double rel_tol(DType d) {
  switch (d) {
    case DType::kF32:
      return 0x1p-24;
    case DType::kBF16:
      return 0x1p-8;
    case DType::kF16:
      return 0x1p-11;
    case DType::kE4M3:
      return 0x1p-4;
  }
  return 0;
}
double abs_floor(DType d) { return d == DType::kE4M3 ? 0x1p-10 : d == DType::kF16 ? 0x1p-25 : 0.0; }

template <typename Elem>
float elem_float(Elem x) {
  if constexpr (std::is_same_v<Elem, bfloat16>)
    return bf16_to_float(x.bits);
  else
    return x;
}

struct RopeRun {
  std::vector<uint8_t> blocks;
  std::vector<uint8_t> out_bytes;
};

template <typename Elem>
void check_case(TestRng& rng, const RopeCase& c) {
  SCOPED_TRACE(describe(c));
  RopeSetup s = make_setup(rng, c);
  std::vector<Elem> q(size_t(s.T * c.Hq * c.D));
  for (Elem& x : q) {
    if constexpr (std::is_same_v<Elem, bfloat16>)
      x.bits = float_to_bf16(rng.normal(0.0f, 3.0f));
    else
      x = rng.normal(0.0f, 3.0f);
  }
  const std::vector<uint8_t> original = s.cache.raw_blocks();
  const RopeOptions o = s.options(c);
  const PagedKVCacheCollection view = s.cache.view();
  std::vector<RopeRun> runs;
  testing::for_each_isa([&](IsaLevel level) {
    s.cache.raw_blocks() = original;
    std::vector<Elem> out(q.size());
    testing::poison(out);
    ASSERT_TRUE(
        fused_qk_rope_ragged(make_view<const Elem>(q.data(), s.T, c.Hq, c.D),
                             make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size())), view,
                             o, 1, make_view(out.data(), s.T, c.Hq, c.D), Context{})
            .ok());
    RopeRun run{s.cache.raw_blocks(), std::vector<uint8_t>(out.size() * sizeof(Elem))};
    if (!out.empty()) std::memcpy(run.out_bytes.data(), out.data(), run.out_bytes.size());
    if (!runs.empty()) {
      EXPECT_EQ(run.blocks, runs[0].blocks) << "K cache differs from the scalar path";
      EXPECT_EQ(run.out_bytes, runs[0].out_bytes) << "output differs from the scalar path";
    }
    runs.push_back(run);
  });
  ASSERT_FALSE(runs.empty());
  const int64_t off = c.placement == RopePlacement::kLeading ? 0 : c.D - c.rope_dim;
  const double rel = rel_tol(c.dtype);
  std::vector<bool> may_change(original.size() / dtype_size(c.dtype), false);
  const auto& result = runs[0].blocks;
  const std::vector<int32_t> seq =
      row_to_sequence(make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size())));
  for (int64_t t = 0; t < s.T; ++t) {
    const int64_t b = seq[size_t(t)];
    const int64_t pos = c.cache_lens[size_t(b)] + t - s.offs[size_t(b)];
    const int64_t angle_pos = c.position_ids ? s.positions[size_t(t)] : pos;
    const float* cs = &s.freqs[size_t(angle_pos * c.rope_dim)];
    // Q: the non-rope part copied, the rope part rotated.
    const Elem* out = reinterpret_cast<const Elem*>(runs[0].out_bytes.data());
    for (int64_t h = 0; h < c.Hq; ++h) {
      std::vector<double> x(size_t(c.D));
      for (int64_t d = 0; d < c.D; ++d)
        x[size_t(d)] = elem_float(q[size_t((t * c.Hq + h) * c.D + d)]);
      std::vector<double> ref = x;
      reference::rope_fp64(ref.data() + off, cs, c.rope_dim, c.layout);
      const double q_rel = std::is_same_v<Elem, bfloat16> ? 0x1p-8 : 0x1p-24;
      for (int64_t d = 0; d < c.D; ++d) {
        const double got = elem_float(out[size_t((t * c.Hq + h) * c.D + d)]);
        const bool rotated = d >= off && d < off + c.rope_dim;
        if (!rotated) {
          ASSERT_EQ(got, x[size_t(d)]) << "q t " << t << " h " << h << " d " << d;
        } else {
          ASSERT_NEAR(got, ref[size_t(d)], q_rel * std::fabs(ref[size_t(d)]) + 8.0 * 0x1p-24 * 12.0)
              << "q t " << t << " h " << h << " d " << d;
        }
      }
    }
    // K: the rope part of every head at the token's cache position, rotated in place.
    const int64_t page = s.cache.view().page_of(b, pos), slot = pos % c.page_size;
    for (int64_t h = 0; h < c.Hk; ++h) {
      std::vector<double> x(size_t(c.D)), scale(size_t(c.D), 1.0);
      for (int64_t d = 0; d < c.D; ++d) {
        const int64_t e = view.element_offset(page, 0, 1, slot, h, d);
        if (view.scales != nullptr)
          scale[size_t(d)] = view.scales[view.scale_offset(page, 0, 1, slot, h, d)];
        x[size_t(d)] = load_as_float(original.data(), c.dtype, e) * scale[size_t(d)];
        if (d >= off && d < off + c.rope_dim) may_change[size_t(e)] = true;
      }
      std::vector<double> ref = x;
      reference::rope_fp64(ref.data() + off, cs, c.rope_dim, c.layout);
      for (int64_t d = off; d < off + c.rope_dim; ++d) {
        const int64_t e = view.element_offset(page, 0, 1, slot, h, d);
        const double sc = scale[size_t(d)];
        double want = ref[size_t(d)];
        if (c.dtype == DType::kE4M3)
          want = std::clamp(want, -448.0 * sc, 448.0 * sc);  // saturating store
        const double got = load_as_float(result.data(), c.dtype, e) * sc;
        ASSERT_NEAR(got, want,
                    rel * std::fabs(want) + abs_floor(c.dtype) * sc + 8.0 * 0x1p-24 * 12.0 * sc)
            << "k t " << t << " h " << h << " d " << d;
      }
    }
  }
  // Everything else of the cache is untouched.
  const size_t es = dtype_size(c.dtype);
  for (size_t e = 0; e < may_change.size(); ++e) {
    if (!may_change[e]) {
      ASSERT_EQ(std::memcmp(&result[e * es], &original[e * es], es), 0) << "element " << e;
    }
  }
}

std::vector<RopeCase> all_cases() {
  std::vector<RopeCase> cases;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3}) {
    for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      RopeCase c;
      c.dtype = dtype;
      c.layout = layout;
      cases.push_back(c);  // full rope, D = rope_dim = 64
      c.D = 96;            // DeepSeek MLA-like partial rope: [nope | rope]
      c.rope_dim = 38;     // pairs not a multiple of any vector width
      cases.push_back(c);
      c.placement = RopePlacement::kLeading;  // the indexer's [rope | nope]
      c.position_ids = true;
      cases.push_back(c);
      if (dtype == DType::kE4M3) {
        c.scale_granularity = 16;  // per-block scales
        cases.push_back(c);
        c.scale_granularity = c.D;  // per-token
        c.position_ids = false;
        cases.push_back(c);
      }
    }
  }
  RopeCase big;  // rope_dim above every vector width, one page per token
  big.D = 192;
  big.rope_dim = 128;
  big.page_size = 1;
  big.seq_lens = {17, 1};
  big.cache_lens = {0, 40};
  cases.push_back(big);
  big.layout = RopeLayout::kHalfSplit;
  cases.push_back(big);
  return cases;
}

TEST(FusedQkRopeRagged, Bf16QueryMatchesFp64OnEveryDtypeAndIsa) {
  TestRng rng;
  for (const RopeCase& c : all_cases()) check_case<bfloat16>(rng, c);
}

TEST(FusedQkRopeRagged, F32QueryMatchesFp64OnEveryDtypeAndIsa) {
  TestRng rng;
  for (const RopeCase& c : all_cases()) check_case<float>(rng, c);
}

TEST(FusedQkRopeRagged, EmptyBatchWritesNothing) {
  TestRng rng;
  RopeCase c;
  c.seq_lens = {0, 0};
  c.cache_lens = {3, 0};
  check_case<bfloat16>(rng, c);
}

// Each bad argument: a named error and no byte of the cache or the output written.
TEST(FusedQkRopeRagged, BadInputIsNamedAndWritesNothing) {
  TestRng rng;
  RopeCase c;
  RopeSetup s = make_setup(rng, c);
  std::vector<float> q(size_t(s.T * c.Hq * c.D), 1.0f), out(q.size());
  const std::vector<uint8_t> original = s.cache.raw_blocks();
  auto run = [&](const RopeOptions& o, uint32_t layer, int64_t D) {
    testing::poison(out);
    const std::vector<float> poisoned = out;
    const Status st = fused_qk_rope_ragged(
        make_view<const float>(q.data(), s.T, c.Hq, D),
        make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size())), s.cache.view(), o, layer,
        make_view(out.data(), s.T, c.Hq, D), Context{});
    EXPECT_EQ(s.cache.raw_blocks(), original);
    EXPECT_EQ(std::memcmp(out.data(), poisoned.data(), out.size() * sizeof(float)), 0);
    return st;
  };
  const RopeOptions good = s.options(c);
  ASSERT_TRUE(fused_qk_rope_ragged(make_view<const float>(q.data(), s.T, c.Hq, c.D),
                                   make_view<const uint32_t>(s.offs.data(), int64_t(s.offs.size())),
                                   s.cache.view(), good, 0, make_view(out.data(), s.T, c.Hq, c.D),
                                   Context{})
                  .ok());
  s.cache.raw_blocks() = original;
  RopeOptions o = good;
  o.freqs_cis.shape[1] = 7;  // odd rope_dim
  EXPECT_NE(run(o, 0, c.D).message().find("rope_dim"), std::string::npos);
  std::vector<float> wide(size_t(s.max_seq_len * (c.D + 2)));
  o = good;
  o.freqs_cis = make_view<const float>(wide.data(), s.max_seq_len, c.D + 2);  // rope_dim > head
  EXPECT_NE(run(o, 0, c.D).message().find("options.freqs_cis"), std::string::npos);
  o = good;
  o.freqs_cis.shape[0] = 3;  // too short for cache_len + i
  const Status short_table = run(o, 0, c.D);
  EXPECT_EQ(short_table.code(), StatusCode::kOutOfRange);
  EXPECT_NE(short_table.message().find("max_seq_len"), std::string::npos);
  o = good;
  std::vector<uint32_t> ids(size_t(s.T), 0);
  ids.back() = uint32_t(s.max_seq_len);  // past the table
  o.position_ids = make_view<const uint32_t>(ids.data(), s.T);
  EXPECT_NE(run(o, 0, c.D).message().find("position_ids[" + std::to_string(s.T - 1) + "]"),
            std::string::npos);
  o = good;
  o.position_ids = make_view<const uint32_t>(ids.data(), s.T - 1);  // wrong length
  EXPECT_NE(run(o, 0, c.D).message().find("options.position_ids"), std::string::npos);
  o = good;
  o.layout = RopeLayout(7);
  EXPECT_NE(run(o, 0, c.D).message().find("options.layout"), std::string::npos);
  o = good;
  o.placement = RopePlacement(7);
  EXPECT_NE(run(o, 0, c.D).message().find("options.placement"), std::string::npos);
  EXPECT_NE(run(good, 2, c.D).message().find("layer_idx"), std::string::npos);
  EXPECT_NE(run(good, 0, c.D / 2).message().find("kv_collection.head_size"), std::string::npos);
  s.cache.raw_lookup_table()[0] = uint32_t(s.cache.config().num_blocks + 3);  // page past the pool
  EXPECT_NE(run(good, 0, c.D).message().find("lookup_table"), std::string::npos);
}

}  // namespace
}  // namespace quantkv
