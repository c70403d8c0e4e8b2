// The lightning indexer (contract §3) against the scalar reference, on every ISA path and several
// thread counts. Three comparisons:
//  - canonical: the library's indices equal those of a reference that computes each score in
//    fp32 in the canonical order (docs/indexer.md), ties included — bitwise-equal scores;
//  - exact mode: small-integer inputs make every fp32 sum exact, so the indices also equal
//    those of a double-precision reference, ties included;
//  - random mode against the double reference with the contract §3 tolerance rule (see
//    check_within_tolerance).
// Structure (no duplicates, no masked index, the -1 tail, no unwritten slot) is always checked.
#include "quantkv/indexer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "cpu/indexer_driver.hpp"
#include "cpu/kernels.hpp"
#include "engine_layout_util.hpp"
#include "quantkv/engine_layout.hpp"
#include "reference/indexer_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

enum class Fill { kExact, kRandom };

struct Shape {
  int64_t H, D, top_k, page_size;
  std::vector<int64_t> seq_lens, cache_lens;
  MaskType mask;
};

std::string describe(const Shape& s) {
  std::string seq, cache;
  for (std::size_t b = 0; b < s.seq_lens.size(); ++b) {
    if (b) {
      seq.push_back(',');
      cache.push_back(',');
    }
    seq.append(std::to_string(s.seq_lens[b]));
    cache.append(std::to_string(s.cache_lens[b]));
  }
  return "H=" + std::to_string(s.H) + " D=" + std::to_string(s.D) +
         " top_k=" + std::to_string(s.top_k) + " page=" + std::to_string(s.page_size) + " seq=[" +
         seq + "] cache=[" + cache + "] mask=" + mask_name(s.mask);
}

struct Problem {
  Shape shape;
  int64_t T = 0;
  PagedKVCache cache;
  PagedKVCacheCollection view;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  std::vector<uint32_t> offs;
  uint32_t layer = 1;

  TensorView<const float8_e4m3fn, 3> qv() const {
    return make_view<const float8_e4m3fn>(q.data(), T, shape.H, shape.D);
  }
  TensorView<const float, 2> qsv() const { return make_view<const float>(q_s.data(), T, shape.H); }
  TensorView<const uint32_t, 1> offv() const {
    return make_view<const uint32_t>(offs.data(), int64_t(offs.size()));
  }
};

uint8_t random_code(TestRng& rng, Fill fill) {
  if (fill == Fill::kExact) return float_to_e4m3(float(rng.uniform_int(-4, 4)));
  return float_to_e4m3(rng.normal(0.0f, 24.0f));  // saturates, never NaN
}

Problem make_problem(const Shape& s, Fill fill, TestRng& rng) {
  Problem p;
  p.shape = s;
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
  int64_t pages = 2, max_pages = 1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t need = (s.seq_lens[b] + s.cache_lens[b] + s.page_size - 1) / s.page_size;
    pages += need;
    max_pages = std::max(max_pages, need + 1);
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
  for (uint8_t& byte : p.cache.raw_blocks()) byte = random_code(rng, fill);
  for (float& sc : p.cache.raw_scales()) {
    sc = fill == Fill::kExact ? std::ldexp(1.0f, int(rng.uniform_int(-1, 1)))
                              : rng.uniform_float(0.01f, 2.0f);
  }
  p.q.resize(std::size_t(p.T * s.H * s.D));
  for (auto& c : p.q) c.bits = random_code(rng, fill);
  p.q_s.resize(std::size_t(p.T * s.H));
  for (float& w : p.q_s)
    w = fill == Fill::kExact ? float(rng.uniform_int(-2, 3)) : rng.normal(0.2f, 1.0f);
  p.view = p.cache.view();
  return p;
}

int64_t key_bound(const Problem& p, int64_t t) {
  int64_t b = 0;
  while (int64_t(p.offs[b + 1]) <= t) ++b;
  const int64_t cache_len = p.shape.cache_lens[b];
  return p.shape.mask == MaskType::kCausal ? cache_len + (t - p.offs[b]) + 1
                                           : cache_len + p.shape.seq_lens[b];
}

std::vector<int32_t> run_library(const Problem& p, int threads, Status* status,
                                 std::size_t budget = std::size_t(512) << 20,
                                 IndexerTimings* timings = nullptr) {
  std::vector<int32_t> out(std::size_t(p.T * p.shape.top_k));
  if (!out.empty()) testing::poison(out);
  Context ctx;
  ctx.num_threads = threads;
  ctx.scores_budget_bytes = budget;
  *status =
      mla_indexer_ragged_float8_paged(make_view(out.data(), p.T, p.shape.top_k), p.qv(), p.qsv(),
                                      p.offv(), p.view, p.layer, p.shape.mask, ctx, timings);
  return out;
}

// The same call over the engines' layout (a copy of layer p.layer), or with global slots.
std::vector<int32_t> run_engine_layout(const Problem& p, const EngineIndexerKCache& k_cache,
                                       int threads, IndexOutput output, Status* status) {
  std::vector<int32_t> out(std::size_t(p.T * p.shape.top_k));
  if (!out.empty()) testing::poison(out);
  Context ctx;
  ctx.num_threads = threads;
  *status = mla_indexer_ragged_float8_paged(make_view(out.data(), p.T, p.shape.top_k), p.qv(),
                                            p.qsv(), p.offv(), k_cache, p.shape.mask, ctx,
                                            IndexerOptions{output, nullptr});
  return out;
}
std::vector<int32_t> run_global_slots(const Problem& p, int threads, Status* status) {
  std::vector<int32_t> out(std::size_t(p.T * p.shape.top_k));
  if (!out.empty()) testing::poison(out);
  Context ctx;
  ctx.num_threads = threads;
  *status = mla_indexer_ragged_float8_paged(make_view(out.data(), p.T, p.shape.top_k), p.qv(),
                                            p.qsv(), p.offv(), p.view, p.layer, p.shape.mask, ctx,
                                            IndexerOptions{IndexOutput::kGlobalSlots, nullptr});
  return out;
}

std::vector<int32_t> run_reference(const Problem& p, reference::ScorePrecision precision) {
  std::vector<int32_t> out(std::size_t(p.T * p.shape.top_k));
  reference::mla_indexer_reference(make_view(out.data(), p.T, p.shape.top_k), p.qv(), p.qsv(),
                                   p.offv(), p.view, p.layer, p.shape.mask, precision);
  return out;
}

// Distinct visible positions, then exactly -1.
void check_structure(const Problem& p, const std::vector<int32_t>& out) {
  const int64_t K = p.shape.top_k;
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

// contract §3 against the double reference: with tau the n-th best reference score of a row and
// eps = (D + H + 4) * 2^-24 * max_j |k_scale| sum_h |q_s| sum_d |q k| (a bound on the fp32
// error of any score of the row): every key scoring above tau + eps is selected; nothing
// selected scores below tau - eps; along the output, a later entry never beats an earlier one
// by more than eps.
void check_within_tolerance(const Problem& p, const std::vector<int32_t>& out) {
  const auto rows = reference::indexer_scores_reference(
      p.qv(), p.qsv(), p.offv(), p.view, p.layer, p.shape.mask, reference::ScorePrecision::kDouble);
  const int64_t K = p.shape.top_k;
  for (int64_t t = 0; t < p.T; ++t) {
    const std::vector<double>& r = rows[t].scores;
    const double eps = double(p.shape.D + p.shape.H + 4) * 0x1p-24 * rows[t].magnitude;
    const int64_t n = std::min<int64_t>(K, int64_t(r.size()));
    std::vector<double> sorted = r;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    const double tau = sorted[n - 1];
    std::set<int32_t> chosen(out.begin() + t * K, out.begin() + t * K + n);
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

void check_case(const Shape& s, Fill fill) {
  SCOPED_TRACE(describe(s) + (fill == Fill::kExact ? " exact" : " random"));
  TestRng rng;
  const Problem p = make_problem(s, fill, rng);
  const std::vector<int32_t> canonical = run_reference(p, reference::ScorePrecision::kCanonical);
  if (fill == Fill::kExact) {
    EXPECT_EQ(canonical, run_reference(p, reference::ScorePrecision::kDouble))
        << "exact inputs: fp32 is exact";
  }
  // The engines' layout (padded pages on odd shapes) and global slots, checked on every path.
  const testing::EngineCopy engine =
      testing::make_engine_copy(p.view, p.layer, s.H % 2 == 1 ? 12 : 0);
  const std::vector<int32_t> slots =
      testing::positions_to_global_slots(canonical, s.top_k, p.offs, p.view);
  testing::for_each_isa([&](IsaLevel level) {
    // 1, 2 and 3 threads on the fastest path; the others (slow under sanitizers) run once.
    const std::vector<int> thread_counts =
        level == max_supported_isa() ? std::vector<int>{1, 2, 3} : std::vector<int>{2};
    for (int threads : thread_counts) {
      SCOPED_TRACE("threads = " + std::to_string(threads));
      Status st;
      const std::vector<int32_t> out = run_library(p, threads, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      check_structure(p, out);
      ASSERT_EQ(out, canonical) << "indices differ from the canonical-order reference";
      ASSERT_EQ(run_engine_layout(p, engine.view, threads, IndexOutput::kPositions, &st), out)
          << "engine layout: indices differ from the MAX layout's";
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(run_engine_layout(p, engine.view, threads, IndexOutput::kGlobalSlots, &st), slots)
          << "engine layout: global slots differ from the reference's positions mapped through the "
             "table";
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(run_global_slots(p, threads, &st), slots) << "MAX layout: global slots";
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
  });
  if (fill == Fill::kRandom) check_within_tolerance(p, canonical);
}

// The parameter lists, sampled rather than crossed: every value of H, D, top_k, page
// size and both masks occurs; mixed prefill/decode, page-crossing lengths, key tiles (256) and
// blocks (64) crossed, empty sequences, top_k above the number of keys.
const std::vector<Shape>& sampled_shapes() {
  static const std::vector<Shape> shapes = {
      {64, 64, 16, 16, {6, 1, 4, 1}, {128, 64, 200, 50}, MaskType::kCausal},
      {64, 128, 2048, 64, {1}, {300}, MaskType::kCausal},  // DeepSeek-V3.2's H, D and top_k
      {8, 128, 16, 16, {6, 1, 4, 1}, {128, 64, 200, 50}, MaskType::kNull},
      {1, 64, 1, 1, {3, 2}, {5, 0}, MaskType::kCausal},
      {4, 64, 3000, 128, {5, 0, 3}, {300, 7, 0}, MaskType::kNull},
      {8, 128, 256, 64, {70}, {0}, MaskType::kCausal},
      {32, 64, 64, 16, {2, 9}, {255, 257}, MaskType::kCausal},
      {4, 64, 2048, 64, {1, 1}, {2100, 600}, MaskType::kCausal},
      {128, 64, 16, 16, {2, 1}, {40, 17}, MaskType::kCausal},
      {3, 48, 16, 16, {4, 2}, {40, 63}, MaskType::kCausal},
      {5, 80, 64, 1, {1, 3}, {65, 129}, MaskType::kNull},
      {16, 128, 256, 128, {2, 1}, {511, 1000}, MaskType::kNull},
  };
  return shapes;
}

TEST(Indexer, ExactInputsMatchBothReferencesOnEveryPath) {
  for (const Shape& s : sampled_shapes()) check_case(s, Fill::kExact);
}

TEST(Indexer, RandomInputsMatchCanonicalReferenceAndDoubleWithinTolerance) {
  for (const Shape& s : sampled_shapes()) check_case(s, Fill::kRandom);
}

TEST(Indexer, EmptyBatchesAndNoTokens) {
  for (const Shape& s : {Shape{64, 128, 64, 16, {0, 0}, {3, 40}, MaskType::kCausal},
                         Shape{4, 64, 8, 16, {}, {}, MaskType::kNull}}) {
    SCOPED_TRACE(describe(s));
    TestRng rng;
    const Problem p = make_problem(s, Fill::kRandom, rng);
    ASSERT_EQ(p.T, 0);
    Status st;
    run_library(p, 2, &st);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
}

TEST(Indexer, NonFiniteScoresRankLastAndNeverBreakTheRow) {
  TestRng rng;
  const Shape s{8, 64, 300, 16, {3, 1}, {150, 270}, MaskType::kCausal};
  Problem p = make_problem(s, Fill::kRandom, rng);
  // NaN elements in some keys, NaN / inf / 0 / negative scales, a NaN in one head of one token.
  for (int i = 0; i < 40; ++i) {
    p.cache
        .raw_blocks()[std::size_t(rng.uniform_int(0, int64_t(p.cache.raw_blocks().size()) - 1))] =
        0x7F;
  }
  auto& scales = p.cache.raw_scales();
  for (int i = 0; i < 40; ++i) {
    const float v[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(), 0.0f, -1.0f};
    scales[std::size_t(rng.uniform_int(0, int64_t(scales.size()) - 1))] = v[i % 4];
  }
  p.q[5 * 64 + 7].bits = 0xFF;  // token 0, head 5
  p.view = p.cache.view();
  const std::vector<int32_t> canonical = run_reference(p, reference::ScorePrecision::kCanonical);
  const testing::EngineCopy engine = testing::make_engine_copy(p.view, p.layer);
  testing::for_each_isa([&](IsaLevel) {
    Status st;
    const std::vector<int32_t> out = run_library(p, 2, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    check_structure(p, out);
    EXPECT_EQ(out, canonical);
    EXPECT_EQ(run_engine_layout(p, engine.view, 2, IndexOutput::kPositions, &st), canonical)
        << "engine layout";
    EXPECT_TRUE(st.ok()) << st.to_string();
  });
}

TEST(Indexer, ChunkingUnderATightBudgetGivesTheSameIndices) {
  TestRng rng;
  const Shape s{16, 64, 32, 16, {40, 1, 30}, {300, 900, 0}, MaskType::kCausal};
  const Problem p = make_problem(s, Fill::kRandom, rng);
  Status st;
  IndexerTimings roomy, tight;
  const std::vector<int32_t> a = run_library(p, 2, &st, std::size_t(512) << 20, &roomy);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::size_t budget = std::size_t(roomy.workspace_bytes) * 6 / 10;
  const std::vector<int32_t> b = run_library(p, 2, &st, budget, &tight);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(roomy.chunks, 1);
  EXPECT_GE(tight.chunks, 2);
  EXPECT_LE(tight.workspace_bytes, int64_t(budget));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, run_reference(p, reference::ScorePrecision::kCanonical));
}

TEST(Indexer, BudgetBelowOneRowIsAnErrorAndWritesNothing) {
  TestRng rng;
  const Problem p = make_problem({4, 64, 8, 16, {2}, {5000}, MaskType::kNull}, Fill::kRandom, rng);
  Status st;
  const std::vector<int32_t> out = run_library(p, 2, &st, 16 << 10);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("scores_budget_bytes"), std::string::npos) << st.message();
  std::vector<int32_t> poisoned(out.size());
  testing::poison(poisoned);
  EXPECT_EQ(out, poisoned);
}

// contract §3 memory: 4096 new tokens against a 128K context stay within the default 512 MiB
// (the plan counts everything the call allocates), in several chunks. Only the plan runs.
TEST(IndexerPlan, Prefill4096Against128KFitsTheDefaultBudget) {
  const int64_t T = 4096, H = 64, D = 128, cache_len = 128 * 1024 - T;
  std::vector<uint32_t> lengths = {uint32_t(cache_len)}, table(2048, 0), offs = {0, uint32_t(T)};
  PagedKVCacheCollection c;
  c.blocks = table.data();
  c.dtype = DType::kE4M3;
  c.num_blocks = 4096;
  c.kv_dim = 1;
  c.page_size = 64;
  c.num_heads = 1;
  c.head_size = D;
  c.cache_lengths = make_view<const uint32_t>(lengths.data(), int64_t(1));
  c.lookup_table = make_view<const uint32_t>(table.data(), int64_t(1), int64_t(2048));
  for (int threads : {1, 2, 16}) {
    cpu::IndexerArgs args;
    args.output = {nullptr, {T, 2048}, {2048, 1}};
    args.q = {nullptr, {T, H, D}, {H * D, D, 1}};
    args.q_s = {nullptr, {T, H}, {H, 1}};
    args.offsets = make_view<const uint32_t>(offs.data(), int64_t(2));
    args.keys = detail::indexer_keys(c, 0);
    args.mask = MaskType::kCausal;
    args.num_threads = threads;
    cpu::IndexerPlan plan;
    const std::size_t budget = std::size_t(512) << 20;
    ASSERT_TRUE(cpu::plan_indexer(args, budget, &plan).ok());
    EXPECT_LE(plan.workspace_bytes + plan.fixed_bytes, budget) << threads << " threads";
    EXPECT_GE(plan.chunk_begin.size(), 4u) << "several chunks";
  }
}

// Each kernel against the others, score by score, on random tiles with NaN and partial key
// blocks: the canonical order makes them bitwise equal.
TEST(IndexerKernels, ScoresAreBitwiseEqualAcrossIsaPaths) {
  TestRng rng;
  for (int trial = 0; trial < 12; ++trial) {
    const int D = 16 * int(rng.uniform_int(1, 10)), H = int(rng.uniform_int(1, 9));
    const int keys = int(rng.uniform_int(1, cpu::kIndexerKeyTile)),
              tokens = int(rng.uniform_int(1, 3));
    SCOPED_TRACE("D=" + std::to_string(D) + " H=" + std::to_string(H) +
                 " keys=" + std::to_string(keys));
    std::vector<uint8_t> k(std::size_t(keys) * D);
    // Mostly values of a realistic spread; one code in 8 any byte (every subnormal, NaN and
    // sign pattern of the decoders), one in 200 NaN.
    for (auto& c : k) {
      c = rng.uniform_int(0, 200) == 0 ? 0x7F
          : rng.uniform_int(0, 7) == 0 ? uint8_t(rng.uniform_int(0, 255))
                                       : float_to_e4m3(rng.normal(0, 30));
    }
    std::vector<const uint8_t*> rows(static_cast<std::size_t>(keys));
    std::vector<float> ks(static_cast<std::size_t>(keys));
    for (int c = 0; c < keys; ++c) {
      rows[c] = k.data() + std::size_t(c) * D;
      ks[c] = rng.uniform_float(0.1f, 3.0f);
    }
    std::vector<uint16_t> q(std::size_t(tokens) * H * D);
    for (auto& v : q) v = e4m3_to_bf16_bits(float_to_e4m3(rng.normal(0, 30)));
    std::vector<float> w(std::size_t(tokens) * H);
    for (auto& v : w) v = rng.normal(0, 1);
    const int64_t stride = (keys + 63) / 64 * 64;
    std::vector<int64_t> row_off(static_cast<std::size_t>(tokens));
    for (int i = 0; i < tokens; ++i) row_off[i] = i * stride;
    cpu::IndexerTile t;
    t.head_dim = D;
    t.num_heads = H;
    t.k_rows = rows.data();
    t.k_scales = ks.data();
    t.num_keys = keys;
    t.q_bf16 = q.data();
    t.q_s = w.data();
    t.num_tokens = tokens;
    t.key_limit0 = keys;
    t.row_offsets = row_off.data();
    std::vector<std::vector<float>> results;
    auto run = [&](cpu::IndexerTileFn score_tile) {
      std::vector<float> scores(std::size_t(tokens * stride), -7.0f);
      std::vector<unsigned char> scratch(cpu::indexer_tile_scratch_bytes(D, H) + 64);
      void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
      t.scores = scores.data();
      score_tile(t, aligned);
      results.push_back(scores);
    };
    for (IsaLevel level : testing::supported_isa_levels()) {
      ASSERT_EQ(cpu::kernels_for(level).level, level);
      run(cpu::kernels_for(level).indexer.score_tile);
    }
#if defined(QUANTKV_X86_KERNELS)
    // AVX-512 BF16 has two K decoders (table-driven with VBMI, arithmetic without): both.
    if (isa_level_supported(IsaLevel::kAvx512) && cpu_features().avx512bf16) {
      run(cpu::indexer_score_tile_avx512bf16);
      if (cpu_features().avx512vbmi) run(cpu::indexer_score_tile_avx512bf16_vbmi);
    }
#endif
    for (std::size_t l = 1; l < results.size(); ++l) {
      for (int i = 0; i < tokens; ++i) {
        for (int c = 0; c < keys; ++c) {
          const float a = results[0][i * stride + c], b = results[l][i * stride + c];
          if (std::isnan(a) && std::isnan(b)) continue;
          uint32_t ua, ub;
          std::memcpy(&ua, &a, 4);
          std::memcpy(&ub, &b, 4);
          ASSERT_EQ(ua, ub) << "isa " << l << " token " << i << " key " << c << ": " << a << " vs "
                            << b;
        }
      }
    }
  }
}

#if defined(QUANTKV_X86_KERNELS)
// The canonical dot order is what the instruction does: one vdpbf16ps lane equals
// fma(a[2l], b[2l], fma(a[2l+1], b[2l+1], acc)), bitwise, on random non-denormal bf16.
TEST(IndexerKernels, VdpbfEmulationMatchesTheInstruction) {
  if (!isa_level_supported(IsaLevel::kAvx512) || !cpu_features().avx512bf16)
    GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  TestRng rng;
  auto random_bf16 = [&](int spread) {
    const uint32_t e = uint32_t(127 + rng.uniform_int(-spread, spread));
    return uint16_t((uint32_t(rng.uniform_int(0, 1)) << 15) | (e << 7) |
                    uint32_t(rng.uniform_int(0, 127)));
  };
  int64_t mismatches = 0;
  for (int it = 0; it < 20000; ++it) {
    uint16_t a[32], b[32];
    float acc[16], expect[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = random_bf16(20);
      b[i] = random_bf16(20);
    }
    for (int l = 0; l < 16; ++l) {
      acc[l] = bf16_to_float(random_bf16(25)) * (1.0f + rng.uniform_float(0, 1));
      const float t = std::fma(bf16_to_float(a[2 * l + 1]), bf16_to_float(b[2 * l + 1]), acc[l]);
      expect[l] = std::fma(bf16_to_float(a[2 * l]), bf16_to_float(b[2 * l]), t);
    }
    cpu::dpbf16ps_once_avx512bf16(a, b, acc);
    for (int l = 0; l < 16; ++l) mismatches += std::memcmp(&acc[l], &expect[l], 4) != 0;
  }
  EXPECT_EQ(mismatches, 0);
}
#endif  // QUANTKV_X86_KERNELS

// ------------------------------------------------------------------ bad input
struct BadCase {
  const char* what;
  StatusCode code;
  const char* names;  // substring the message must contain
};

TEST(Indexer, EveryBadArgumentHasItsOwnErrorAndWritesNothing) {
  TestRng rng;
  const Shape s{4, 64, 8, 16, {3, 2}, {20, 7}, MaskType::kCausal};
  const Problem base = make_problem(s, Fill::kRandom, rng);
  std::vector<int32_t> out(std::size_t(base.T * s.top_k));
  std::vector<float8_e4m3fn> q_big(std::size_t(base.T * 4 * 80));
  auto check = [&](const BadCase& bc, auto mutate) {
    SCOPED_TRACE(bc.what);
    Problem p = make_problem(s, Fill::kRandom, rng);
    auto out_v = make_view(out.data(), p.T, s.top_k);
    auto q_v = p.qv();
    auto qs_v = p.qsv();
    auto offs_v = p.offv();
    PagedKVCacheCollection cache = p.view;
    uint32_t layer = p.layer;
    MaskType mask = s.mask;
    Context ctx;
    mutate(out_v, q_v, qs_v, offs_v, cache, layer, mask, ctx, p);
    testing::poison(out);
    const Status st =
        mla_indexer_ragged_float8_paged(out_v, q_v, qs_v, offs_v, cache, layer, mask, ctx);
    EXPECT_EQ(st.code(), bc.code) << st.to_string();
    EXPECT_NE(st.message().find(bc.names), std::string::npos) << st.message();
    std::vector<int32_t> poisoned(out.size());
    testing::poison(poisoned);
    EXPECT_EQ(out, poisoned) << "output written despite the error";
  };
  using O = TensorView<int32_t, 2>;
  using Q = TensorView<const float8_e4m3fn, 3>;
  using S = TensorView<const float, 2>;
  using F = TensorView<const uint32_t, 1>;
  using C = PagedKVCacheCollection;
  static std::vector<uint32_t> bad_offs;
  static std::vector<uint32_t> bad_table;
  static std::vector<uint32_t> bad_lengths;
  check({"D not a multiple of 16", StatusCode::kInvalidArgument, "q:"},
        [&](O&, Q& q, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) {
          q.shape[2] = 40;
          q.strides = contiguous_strides<3>(q.shape);
        });
  check({"H = 0", StatusCode::kInvalidArgument, "q:"},
        [&](O&, Q& q, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) { q.shape[1] = 0; });
  check({"q null", StatusCode::kInvalidArgument, "q:"},
        [&](O&, Q& q, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) { q.data = nullptr; });
  check({"q D strided", StatusCode::kInvalidArgument, "q:"},
        [&](O&, Q& q, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) {
          q = {q_big.data(), {q.shape[0], 4, 64}, {4 * 80 * 2, 80 * 2, 2}};
        });
  check({"q_s shape", StatusCode::kInvalidArgument, "q_s"},
        [&](O&, Q&, S& qs, F&, C&, uint32_t&, MaskType&, Context&, Problem&) { qs.shape[1] = 3; });
  check({"output rows", StatusCode::kInvalidArgument, "output_indices"},
        [&](O& o, Q&, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) { o.shape[0] = 4; });
  check({"top_k = 0", StatusCode::kInvalidArgument, "output_indices"},
        [&](O& o, Q&, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) { o.shape[1] = 0; });
  check({"output strided", StatusCode::kInvalidArgument, "output_indices"},
        [&](O& o, Q&, S&, F&, C&, uint32_t&, MaskType&, Context&, Problem&) {
          o.shape[1] = 4;
          o.strides = {8, 2};
        });
  check({"offsets length", StatusCode::kInvalidArgument, "input_row_offsets"},
        [&](O&, Q&, S&, F& f, C&, uint32_t&, MaskType&, Context&, Problem&) { f.shape[0] = 2; });
  check({"offsets decrease", StatusCode::kInvalidArgument, "input_row_offsets"},
        [&](O&, Q&, S&, F& f, C&, uint32_t&, MaskType&, Context&, Problem&) {
          bad_offs = {0, 4, 3};
          f = make_view<const uint32_t>(bad_offs.data(), int64_t(3));
        });
  check({"offsets end", StatusCode::kInvalidArgument, "input_row_offsets"},
        [&](O&, Q&, S&, F& f, C&, uint32_t&, MaskType&, Context&, Problem&) {
          bad_offs = {0, 3, 4};
          f = make_view<const uint32_t>(bad_offs.data(), int64_t(3));
        });
  check({"cache dtype", StatusCode::kInvalidArgument, "k_collection.dtype"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem&) {
          c.dtype = DType::kBF16;
        });
  check({"cache heads", StatusCode::kInvalidArgument, "k_collection.num_heads"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem&) {
          c.num_heads = 2;
          c.head_size = 32;
        });
  check({"cache head size", StatusCode::kInvalidArgument, "k_collection.head_size"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem&) { c.head_size = 128; });
  check({"no scales", StatusCode::kInvalidArgument, "k_collection.scales"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem&) {
          c.scales = nullptr;
          c.scale_granularity = 0;
        });
  check({"scale granularity", StatusCode::kInvalidArgument, "k_collection.scale_granularity"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem&) {
          c.scale_granularity = 32;
        });
  check({"layer", StatusCode::kOutOfRange, "layer_idx"},
        [&](O&, Q&, S&, F&, C&, uint32_t& l, MaskType&, Context&, Problem&) { l = 2; });
  check({"mask value", StatusCode::kInvalidArgument, "mask"},
        [&](O&, Q&, S&, F&, C&, uint32_t&, MaskType& m, Context&, Problem&) { m = MaskType(7); });
  check({"missing page", StatusCode::kOutOfRange, "k_collection.lookup_table"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem& p) {
          bad_table = p.cache.raw_lookup_table();
          bad_table[1] = uint32_t(c.num_blocks);  // sequence 0, positions 16..22
          c.lookup_table.data = bad_table.data();
        });
  check({"cache too long for the table", StatusCode::kOutOfRange, "k_collection.cache_lengths"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem& p) {
          bad_lengths = p.cache.raw_cache_lengths();
          bad_lengths[1] = 1000;
          c.cache_lengths.data = bad_lengths.data();
        });
  check({"cache batch", StatusCode::kInvalidArgument, "input_row_offsets"},
        [&](O&, Q&, S&, F&, C& c, uint32_t&, MaskType&, Context&, Problem&) {
          c.cache_lengths.shape[0] = 1;
          c.lookup_table.shape[0] = 1;
        });
  check({"budget", StatusCode::kResourceExhausted, "scores_budget_bytes"},
        [&](O&, Q&, S&, F&, C&, uint32_t&, MaskType&, Context& ctx, Problem&) {
          ctx.scores_budget_bytes = 1000;
        });
  check({"threads", StatusCode::kInvalidArgument, "ctx.num_threads"},
        [&](O&, Q&, S&, F&, C&, uint32_t&, MaskType&, Context& ctx, Problem&) {
          ctx.num_threads = -1;
        });
}

TEST(Indexer, ParseMaskAcceptsMaxStrings) {
  MaskType m;
  for (const char* s : {"causal", "CAUSAL", "MaskName.CAUSAL", "causal_mask"}) {
    if (std::string(s) == "causal_mask") continue;
    ASSERT_TRUE(parse_mask(s, &m).ok()) << s;
    EXPECT_EQ(m, MaskType::kCausal) << s;
  }
  for (const char* s : {"null", "NULL", "MaskName.NULL", "no_mask", "none"}) {
    ASSERT_TRUE(parse_mask(s, &m).ok()) << s;
    EXPECT_EQ(m, MaskType::kNull) << s;
  }
  const Status bad = parse_mask("sliding_window", &m);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("mask"), std::string::npos);
  EXPECT_STREQ(mask_name(MaskType::kCausal), "causal");
  EXPECT_STREQ(mask_name(MaskType::kNull), "null");
}

}  // namespace
}  // namespace quantkv
