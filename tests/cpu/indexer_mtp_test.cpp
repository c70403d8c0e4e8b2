// MTP / speculative decode through the lightning indexer (issue #31, docs/indexer.md "MTP"):
// next_n = 1..8 query rows per sequence, where row i of a sequence with context length L sees
// the keys [0, L - next_n + i + 1) (DeepGEMM's fp8_paged_mqa_logits convention; its 2-D
// context lengths [B, next_n] give each row its own count).
//
// The oracle here is written from that convention directly, from L and next_n (or the 2-D
// lengths), over a cache built the way DeepGEMM's test builds one (uint8 [num_blocks,
// block_kv, D + 4], shuffled block table, int32, -1 for no page): it never sees a cache
// length or row offsets. The library is called through the mapping docs/indexer.md documents
// (mtp_to_ragged below, the engine's glue) and must give the oracle's indices exactly, ties
// included, on every ISA path and with 1 and 2 threads. The oracle scores in the canonical
// fp32 order of docs/indexer.md; in exact mode (small integers) it also equals a double
// oracle, so the comparison does not rest on that order alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/indexer_keys.hpp"
#include "cpu/indexer_driver.hpp"
#include "cpu/indexer_kernels.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

enum class Fill { kExact, kRandom };

struct MtpShape {
  int64_t H, D, top_k, page_size, next_n;
  std::vector<int64_t> context_lens;  // L per sequence, L >= next_n
};

std::string describe(const MtpShape& s) {
  std::string lens;
  for (int64_t L : s.context_lens) {
    if (!lens.empty()) lens += ',';
    lens += std::to_string(L);
  }
  return "next_n=" + std::to_string(s.next_n) + " H=" + std::to_string(s.H) +
         " D=" + std::to_string(s.D) + " top_k=" + std::to_string(s.top_k) +
         " page=" + std::to_string(s.page_size) + " L=[" + lens + "]";
}

// What an engine holds for one MTP decode step, in DeepGEMM's form.
struct MtpBatch {
  MtpShape shape;
  int64_t B = 0, T = 0, num_blocks = 0, max_pages = 0;
  std::vector<float> kv_storage;       // the uint8 [num_blocks, page, D + 4] buffer (aligned)
  std::vector<int32_t> block_table;    // [B, max_pages], shuffled page ids, -1 past the end
  std::vector<float8_e4m3fn> q;        // [B * next_n, H, D] (DeepGEMM: [B, next_n, H, D])
  std::vector<float> weights;          // [B * next_n, H]
  std::vector<int32_t> context_lens2;  // [B, next_n]: the 2-D form, row i's visible keys

  const uint8_t* kv() const { return reinterpret_cast<const uint8_t*>(kv_storage.data()); }
  int64_t page_bytes() const { return shape.page_size * (shape.D + 4); }
  const uint8_t* key(int64_t page, int64_t slot) const {
    return kv() + page * page_bytes() + slot * shape.D;
  }
  float scale(int64_t page, int64_t slot) const {
    float s;
    std::memcpy(&s, kv() + page * page_bytes() + shape.page_size * shape.D + 4 * slot, 4);
    return s;
  }
};

uint8_t random_code(TestRng& rng, Fill fill) {
  if (fill == Fill::kExact) return float_to_e4m3(float(rng.uniform_int(-4, 4)));
  return float_to_e4m3(rng.normal(0.0f, 24.0f));  // saturates, never NaN
}

MtpBatch make_batch(const MtpShape& s, Fill fill, TestRng& rng) {
  MtpBatch m;
  m.shape = s;
  m.B = int64_t(s.context_lens.size());
  m.T = m.B * s.next_n;
  std::vector<int64_t> need(std::size_t(m.B));
  for (int64_t b = 0; b < m.B; ++b) {
    need[b] = (s.context_lens[b] + s.page_size - 1) / s.page_size;
    m.num_blocks += need[b];
    m.max_pages = std::max(m.max_pages, need[b] + 1);  // a -1 entry past every sequence's end
  }
  m.num_blocks += 3;  // pages that belong to nobody
  std::vector<int32_t> ids(std::size_t(m.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  m.block_table.assign(std::size_t(m.B * m.max_pages), -1);
  std::size_t next = 0;
  for (int64_t b = 0; b < m.B; ++b) {
    for (int64_t p = 0; p < need[b]; ++p) m.block_table[b * m.max_pages + p] = ids[next++];
  }
  m.kv_storage.resize(std::size_t(m.num_blocks * m.page_bytes() / 4));
  for (int64_t page = 0; page < m.num_blocks; ++page) {
    uint8_t* base = reinterpret_cast<uint8_t*>(m.kv_storage.data()) + page * m.page_bytes();
    for (int64_t i = 0; i < s.page_size * s.D; ++i) base[i] = random_code(rng, fill);
    for (int64_t slot = 0; slot < s.page_size; ++slot) {
      const float sc = fill == Fill::kExact ? std::ldexp(1.0f, int(rng.uniform_int(-1, 1)))
                                            : rng.uniform_float(0.01f, 2.0f);
      std::memcpy(base + s.page_size * s.D + 4 * slot, &sc, 4);
    }
  }
  m.q.resize(std::size_t(m.T * s.H * s.D));
  for (auto& c : m.q) c.bits = random_code(rng, fill);
  m.weights.resize(std::size_t(m.T * s.H));
  for (float& w : m.weights)
    w = fill == Fill::kExact ? float(rng.uniform_int(-2, 3)) : rng.normal(0.2f, 1.0f);
  m.context_lens2.resize(std::size_t(m.T));
  for (int64_t b = 0; b < m.B; ++b) {
    for (int64_t i = 0; i < s.next_n; ++i) {
      m.context_lens2[b * s.next_n + i] = int32_t(s.context_lens[b] - s.next_n + i + 1);
    }
  }
  return m;
}

// ------------------------------------------------------------------ the oracle
// Row r = b * next_n + i scores the keys [0, visible[r]) of sequence b, reading each key
// through the block table; score = k_scale * sum_h max(q . k, 0) * w[h], the dot and the head
// sum in docs/indexer.md's canonical fp32 order (or in double); top_k by a stable sort on
// (score descending, position ascending), then -1.
enum class Precision { kFloat, kDouble };

std::vector<int32_t> oracle(const MtpBatch& m, const std::vector<int32_t>& visible,
                            Precision precision) {
  const MtpShape& s = m.shape;
  std::vector<int32_t> out(std::size_t(m.T * s.top_k), -1);
  for (int64_t r = 0; r < m.T; ++r) {
    const int64_t b = r / s.next_n, n = visible[r];
    std::vector<double> score(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t page = m.block_table[b * m.max_pages + j / s.page_size], slot = j % s.page_size;
      const uint8_t* k = m.key(page, slot);
      float acc32 = 0.0f;
      double acc64 = 0.0;
      for (int64_t h = 0; h < s.H; ++h) {
        const float8_e4m3fn* q = &m.q[std::size_t((r * s.H + h) * s.D)];
        const float w = m.weights[std::size_t(r * s.H + h)];
        float dot32 = 0.0f;
        double dot64 = 0.0;
        for (int64_t d = 0; d < s.D; d += 2) {
          dot32 = std::fma(e4m3_to_float(q[d + 1].bits), e4m3_to_float(k[d + 1]), dot32);
          dot32 = std::fma(e4m3_to_float(q[d].bits), e4m3_to_float(k[d]), dot32);
          dot64 += double(e4m3_to_float(q[d].bits)) * double(e4m3_to_float(k[d])) +
                   double(e4m3_to_float(q[d + 1].bits)) * double(e4m3_to_float(k[d + 1]));
        }
        acc32 = std::fma(std::max(0.0f, dot32), w, acc32);
        acc64 += std::max(0.0, dot64) * double(w);
      }
      score[j] = precision == Precision::kFloat ? double(acc32 * m.scale(page, slot))
                                                : acc64 * double(m.scale(page, slot));
    }
    std::vector<int32_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return score[x] > score[y]; });
    for (int64_t i = 0; i < std::min(n, s.top_k); ++i) out[r * s.top_k + i] = order[i];
  }
  return out;
}

// DeepGEMM's 1-D convention: row i of sequence b sees L[b] - next_n + i + 1 keys.
std::vector<int32_t> visible_1d(const MtpShape& s) {
  std::vector<int32_t> v;
  for (int64_t L : s.context_lens) {
    for (int64_t i = 0; i < s.next_n; ++i) v.push_back(int32_t(L - s.next_n + i + 1));
  }
  return v;
}

// ------------------------------------------------------------------ the engine's glue
// docs/indexer.md, "MTP": next_n rows per sequence are a ragged batch with offsets b * next_n
// and cache length L - next_n (row i then sees cache_len + i + 1 = L - next_n + i + 1 keys),
// over the engine's buffer and block table as they are.
struct RaggedForm {
  std::vector<uint32_t> offsets;        // [B + 1]
  std::vector<uint32_t> cache_lengths;  // [B]
  EngineIndexerKCache cache;
};

RaggedForm mtp_to_ragged(const MtpBatch& m, const std::vector<int64_t>& context_lens) {
  RaggedForm f;
  for (int64_t b = 0; b <= m.B; ++b) f.offsets.push_back(uint32_t(b * m.shape.next_n));
  for (int64_t L : context_lens) f.cache_lengths.push_back(uint32_t(L - m.shape.next_n));
  f.cache.data = const_cast<uint8_t*>(m.kv());
  f.cache.num_blocks = m.num_blocks;
  f.cache.page_size = m.shape.page_size;
  f.cache.head_size = m.shape.D;
  f.cache.cache_lengths = make_view<const uint32_t>(f.cache_lengths.data(), m.B);
  f.cache.lookup_table =
      as_uint32_view(make_view<const int32_t>(m.block_table.data(), m.B, m.max_pages));
  return f;
}

// The 2-D form [B, next_n]: L = context_lens2[b][next_n - 1], valid when the rows' counts
// step by one (which DeepGEMM's 1-D form implies and vLLM passes).
bool context_lens_from_2d(const MtpBatch& m, std::vector<int64_t>* lens) {
  const int64_t n = m.shape.next_n;
  lens->clear();
  for (int64_t b = 0; b < m.B; ++b) {
    const int32_t* row = &m.context_lens2[std::size_t(b * n)];
    for (int64_t i = 1; i < n; ++i) {
      if (row[i] != row[0] + i) return false;
    }
    lens->push_back(row[n - 1]);
  }
  return true;
}

std::vector<int32_t> run_library(const MtpBatch& m, const RaggedForm& f, int threads, Status* st) {
  std::vector<int32_t> out(std::size_t(m.T * m.shape.top_k));
  testing::poison(out);
  MlaIndexerArgs a;
  a.output_indices = make_view(out.data(), m.T, m.shape.top_k);
  a.q = make_view<const float8_e4m3fn>(m.q.data(), m.T, m.shape.H, m.shape.D);
  a.q_s = make_view<const float>(m.weights.data(), m.T, m.shape.H);
  a.input_row_offsets = make_view<const uint32_t>(f.offsets.data(), m.B + 1);
  a.k_cache = &f.cache;
  a.mask = MaskType::kCausal;
  Context ctx;
  ctx.num_threads = threads;
  *st = mla_indexer(a, ctx);
  return out;
}

void check_every_path(const MtpBatch& m, const RaggedForm& f, const std::vector<int32_t>& want) {
  testing::for_each_isa([&](IsaLevel) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads = " + std::to_string(threads));
      Status st;
      const std::vector<int32_t> out = run_library(m, f, threads, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(out, want) << "indices differ from the DeepGEMM-convention oracle";
    }
  });
}

// next_n = 1..8; per next_n, sequences with L == next_n (the first row sees one key),
// lengths that end inside a page and cross 64-key blocks and 256-key tiles; top_k below and
// above the rows' key counts; odd head counts.
std::vector<MtpShape> mtp_shapes(TestRng& rng) {
  std::vector<MtpShape> shapes;
  const int64_t pages[] = {16, 64, 1, 64, 16, 64, 7, 64};
  const int64_t heads[] = {8, 64, 3, 16, 5, 8, 1, 4};
  for (int64_t n = 1; n <= 8; ++n) {
    MtpShape s{heads[n - 1], n % 2 ? 64 : 128, n % 3 ? 64 : 300, pages[n - 1], n, {}};
    s.context_lens = {n, n + rng.uniform_int(1, 60), 256 + rng.uniform_int(1, 300),
                      rng.uniform_int(n, 700)};
    if (n % 2 == 0) s.context_lens.push_back(256 * 2 + n - 1);  // the last row ends a tile
    shapes.push_back(s);
  }
  shapes.push_back({8, 64, 16, 16, 1, {1}});                  // L = 1, next_n = 1
  shapes.push_back({64, 128, 2048, 64, 4, {2100, 4, 3000}});  // DeepSeek-V3.2's H, D, top_k
  return shapes;
}

void check_shape(const MtpShape& s, Fill fill) {
  SCOPED_TRACE(describe(s) + (fill == Fill::kExact ? " exact" : " random"));
  TestRng rng;
  const MtpBatch m = make_batch(s, fill, rng);
  const std::vector<int32_t> want = oracle(m, visible_1d(s), Precision::kFloat);
  if (fill == Fill::kExact) {
    ASSERT_EQ(want, oracle(m, visible_1d(s), Precision::kDouble))
        << "exact inputs: the fp32 and double oracles agree";
  }
  check_every_path(m, mtp_to_ragged(m, s.context_lens), want);
}

TEST(IndexerMtp, NextN1To8MatchTheDeepGemmConventionOnEveryPath) {
  TestRng rng;
  for (const MtpShape& s : mtp_shapes(rng)) {
    check_shape(s, Fill::kRandom);
    check_shape(s, Fill::kExact);
  }
}

// The 2-D context lengths [B, next_n]: the oracle reads each row's count from them; the glue
// recovers L from the last column after checking the step-by-one pattern.
TEST(IndexerMtp, TwoDimensionalContextLengthsGiveTheSameIndices) {
  TestRng rng;
  for (int64_t n : {2, 3, 5, 8}) {
    const MtpShape s{8, 64, 32, 16, n, {n + 1, 300, 77}};
    SCOPED_TRACE(describe(s));
    const MtpBatch m = make_batch(s, Fill::kRandom, rng);
    std::vector<int64_t> lens;
    ASSERT_TRUE(context_lens_from_2d(m, &lens));
    ASSERT_EQ(lens, s.context_lens);
    check_every_path(m, mtp_to_ragged(m, lens), oracle(m, m.context_lens2, Precision::kFloat));
  }
}

// 2-D lengths that do not step by one (rows with their own counts, e.g. padded draft rows
// repeating a length) have no (offsets, cache_lengths) form with next_n rows per sequence;
// the documented fallback makes every row its own sequence of one token (cache length
// count - 1) over a copy of its sequence's block-table row. Same oracle, same bits.
TEST(IndexerMtp, ArbitraryTwoDimensionalLengthsByOneRowPerSequence) {
  TestRng rng;
  const MtpShape s{8, 64, 40, 16, 4, {90, 300, 33}};
  MtpBatch m = make_batch(s, Fill::kRandom, rng);
  for (int64_t r = 0; r < m.T; ++r) {
    const int64_t L = s.context_lens[std::size_t(r / s.next_n)];
    m.context_lens2[std::size_t(r)] = int32_t(rng.uniform_int(1, L));
  }
  std::vector<int64_t> lens;
  ASSERT_FALSE(context_lens_from_2d(m, &lens)) << "the drawn lengths should not step by one";
  RaggedForm f;
  std::vector<int32_t> table;
  for (int64_t r = 0; r <= m.T; ++r) f.offsets.push_back(uint32_t(r));
  for (int64_t r = 0; r < m.T; ++r) {
    f.cache_lengths.push_back(uint32_t(m.context_lens2[std::size_t(r)] - 1));
    const int32_t* row = &m.block_table[std::size_t((r / s.next_n) * m.max_pages)];
    table.insert(table.end(), row, row + m.max_pages);
  }
  f.cache = mtp_to_ragged(m, s.context_lens).cache;
  f.cache.cache_lengths = make_view<const uint32_t>(f.cache_lengths.data(), m.T);
  f.cache.lookup_table = as_uint32_view(make_view<const int32_t>(table.data(), m.T, m.max_pages));
  // run_library passes B + 1 offsets; here every row is a sequence.
  MtpBatch rows = m;
  rows.B = m.T;
  check_every_path(rows, f, oracle(m, m.context_lens2, Precision::kFloat));
}

// L < next_n is not a state DeepGEMM's convention describes (row 0 would see no key): the
// cache length L - next_n wraps as uint32, and the library names the argument and writes
// nothing.
TEST(IndexerMtp, ContextShorterThanNextNIsANamedErrorAndWritesNothing) {
  TestRng rng;
  const MtpShape s{4, 64, 8, 16, 4, {40, 10}};
  const MtpBatch m = make_batch(s, Fill::kRandom, rng);
  const RaggedForm f = mtp_to_ragged(m, {40, 3});
  Status st;
  const std::vector<int32_t> out = run_library(m, f, 2, &st);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("k_cache.cache_lengths"), std::string::npos) << st.to_string();
  std::vector<int32_t> poisoned(out.size());
  testing::poison(poisoned);
  EXPECT_EQ(out, poisoned);
}

// The schedule: one score item per (sequence, K tile), holding every one of that sequence's
// next_n rows that sees the tile, so each tile is gathered and repacked once for all of them
// (the kernels repack an item's tile once and stream its rows over it).
TEST(IndexerMtp, TheNextNRowsOfASequenceShareEveryKTile) {
  TestRng rng;
  for (int64_t n : {1, 2, 3, 4, 7, 8}) {
    const MtpShape s{64, 128, 2048, 64, n, {32 * 1024, 1000, 256 + n - 1, n}};
    SCOPED_TRACE(describe(s));
    MtpBatch m;
    m.shape = s;
    m.B = int64_t(s.context_lens.size());
    m.T = m.B * n;
    m.max_pages = 32 * 1024 / 64;
    m.num_blocks = m.max_pages;
    m.block_table.assign(std::size_t(m.B * m.max_pages), 0);  // only the plan reads it
    m.q.resize(std::size_t(m.T * s.H * s.D));
    m.weights.resize(std::size_t(m.T * s.H));
    std::vector<int32_t> out(std::size_t(m.T * s.top_k));
    std::vector<float> fake_kv(4);
    m.kv_storage = fake_kv;
    const RaggedForm f = mtp_to_ragged(m, s.context_lens);
    cpu::IndexerArgs a{make_view(out.data(), m.T, s.top_k),
                       make_view<const float8_e4m3fn>(m.q.data(), m.T, s.H, s.D),
                       make_view<const float>(m.weights.data(), m.T, s.H),
                       make_view<const uint32_t>(f.offsets.data(), m.B + 1),
                       detail::indexer_keys(f.cache),
                       MaskType::kCausal,
                       IndexOutput::kPositions,
                       2};
    cpu::IndexerPlan plan;
    ASSERT_TRUE(cpu::plan_indexer(a, std::size_t(512) << 20, &plan).ok());
    ASSERT_EQ(plan.chunk_begin, (std::vector<int64_t>{0, m.T})) << "one chunk";
    std::vector<cpu::IndexerWorkItem> items;
    items.reserve(std::size_t(m.B * (32 * 1024 / cpu::kIndexerKeyTile + 1)));
    cpu::make_indexer_items(plan, 0, m.T, &items);
    std::size_t k = 0;
    for (int64_t b = 0; b < m.B; ++b) {
      const int64_t L = s.context_lens[b];
      for (int64_t j0 = 0; j0 < L; j0 += cpu::kIndexerKeyTile, ++k) {
        ASSERT_LT(k, items.size());
        const cpu::IndexerWorkItem& it = items[k];
        EXPECT_EQ(it.seq, b);
        EXPECT_EQ(it.key_begin, j0);
        // Rows b * n + i with L - n + i + 1 > j0 see the tile; they are all in the item.
        const int64_t first_row = b * n + std::max<int64_t>(0, j0 - (L - n + 1) + 1);
        EXPECT_EQ(it.row_begin, first_row) << "tile " << j0;
        EXPECT_EQ(it.row_end, (b + 1) * n) << "tile " << j0;
        // No item without a visible key: its first row sees the tile's first key.
        ASSERT_LT(it.row_begin, it.row_end) << "tile " << j0;
        EXPECT_GT(plan.key_bound[it.row_begin], it.key_begin) << "tile " << j0;
      }
    }
    EXPECT_EQ(k, items.size()) << "one item per (sequence, tile), no other";
  }
}

}  // namespace
}  // namespace quantkv
