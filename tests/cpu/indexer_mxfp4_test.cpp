// The MXFP4 index-K cache (issue #31, docs/indexer.md "MXFP4 K cache"): the K store's bytes
// against a reference of vLLM's DeepSeek-V4 insert written here in double precision, and the
// indexer over the cache against an oracle written from the contract: value(d) = e2m1(code_d) *
// 2^(byte_{d/32} - 127), scored as k_scale * sum_h max(q . k_rel, 0) * q_s[h] with k_scale =
// 2^(max byte - 127) and k_rel the values relative to it (blocks shifted below 2^-116 are
// zeros), the dot and head sum in the canonical fp32 order of docs/indexer.md. In exact mode
// (small values, every sum exact) the oracle also runs in double, so the comparison does not
// rest on that order alone. Every ISA path, 1 and 2 threads, outputs poisoned; shuffled page
// tables with -1 past the end, padded pages, partial pages, sequences without new rows, key
// counts below/at/above the 64-key block and the 256-key tile, both masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

enum class Fill { kExact, kRandom, kSpecial };

struct Seq {
  int64_t cache_len, rows;
};
struct Shape {
  int64_t H, D, top_k, page_size, pad;
  std::vector<Seq> seqs;
  MaskType mask = MaskType::kCausal;
};

std::string describe(const Shape& s) {
  std::ostringstream o;
  o << "H=" << s.H << " D=" << s.D << " top_k=" << s.top_k << " page=" << s.page_size
    << " pad=" << s.pad << " mask=" << mask_name(s.mask) << " seqs=";
  for (const Seq& q : s.seqs) o << "(" << q.cache_len << "+" << q.rows << ")";
  return o.str();
}

// An engine's MXFP4 indexer cache for one step, its block table (shuffled, int32, -1 past each
// sequence's pages) and the step's queries.
struct Batch {
  Shape s;
  int64_t B = 0, T = 0, num_blocks = 0, max_pages = 0;
  std::vector<uint8_t> buf;
  std::vector<int32_t> table;
  std::vector<uint32_t> offsets, cache_lengths;
  std::vector<float8_e4m3fn> q;
  std::vector<float> q_s;
  EngineIndexerKCache cache;
  IndexKFormat format = IndexKFormat::kMxfp4;
  float g = 1.0f;  // NVFP4's global scale

  bool nvfp4() const { return format == IndexKFormat::kNvfp4; }
  int64_t sf_bytes() const { return nvfp4() ? s.D / 16 : s.D / 32; }
  int64_t page_bytes() const { return s.page_size * (s.D / 2 + sf_bytes()) + s.pad; }
  int64_t keys(int64_t b) const { return s.seqs[b].cache_len + s.seqs[b].rows; }
  int64_t page_of(int64_t b, int64_t pos) const { return table[b * max_pages + pos / s.page_size]; }
  int64_t codes_offset(int64_t page, int64_t slot) const {
    return page * page_bytes() + slot * (s.D / 2);
  }
  int64_t sf_offset(int64_t page, int64_t slot) const {
    return page * page_bytes() + s.page_size * (s.D / 2) + slot * sf_bytes();
  }
  uint8_t* codes(int64_t page, int64_t slot) { return buf.data() + codes_offset(page, slot); }
  uint8_t* sf(int64_t page, int64_t slot) { return buf.data() + sf_offset(page, slot); }
};

uint8_t random_q(TestRng& rng, Fill fill) {
  if (fill == Fill::kExact) return float_to_e4m3(float(rng.uniform_int(-4, 4)));
  return float_to_e4m3(rng.normal(0.0f, 24.0f));
}

// NVFP4 block scales: exact mode e4m3 values with at most 2 significant bits in [0.25, 3];
// random mode any finite e4m3 byte (subnormals included); special mode also NaN (0x7F, 0xFF).
void fill_nvfp4_scales(uint8_t* sf, int64_t nb, TestRng& rng, Fill fill) {
  for (int64_t b = 0; b < nb; ++b) {
    if (fill == Fill::kExact) {
      static const float kValues[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.5f, 2.0f, 3.0f};
      sf[b] = float_to_e4m3(kValues[rng.uniform_int(0, 6)]);
      continue;
    }
    uint8_t x = uint8_t(rng.uniform_int(0, 255));
    if ((x & 0x7F) == 0x7F && !(fill == Fill::kSpecial && rng.uniform_int(0, 3) == 0)) x ^= 1;
    sf[b] = x;
  }
}

// MXFP4 scale bytes of one key: exact mode within 2^[-2, 2]; random mode around 2^0 with, now
// and then, a block far below the others (flushed when more than 2^116 below), the extremes 0
// and 254; special mode adds 0xFF (a NaN scale).
void fill_key_scales(uint8_t* sf, int64_t nb, TestRng& rng, Fill fill) {
  for (int64_t b = 0; b < nb; ++b) {
    sf[b] = fill == Fill::kExact ? uint8_t(rng.uniform_int(125, 129))
                                 : uint8_t(rng.uniform_int(107, 147));
  }
  if (fill == Fill::kExact) return;
  const int64_t r = rng.uniform_int(0, 15), b = rng.uniform_int(0, nb - 1);
  if (r == 0) sf[b] = uint8_t(std::max(0, int(sf[(b + 1) % nb]) - int(rng.uniform_int(110, 125))));
  if (r == 1) sf[b] = 0;
  if (r == 2) sf[b] = 254;
  if (r == 3 && fill == Fill::kSpecial) sf[b] = 0xFF;
}

Batch make_batch(const Shape& s, Fill fill, TestRng& rng,
                 IndexKFormat format = IndexKFormat::kMxfp4) {
  Batch m;
  m.s = s;
  m.format = format;
  // NVFP4's global scale: a power of two in exact mode (fl(1/g) exact), any value otherwise.
  m.g = fill == Fill::kExact ? std::ldexp(1.0f, int(rng.uniform_int(-1, 1)))
                             : rng.uniform_float(0.05f, 20.0f);
  m.B = int64_t(s.seqs.size());
  std::vector<int64_t> need(static_cast<std::size_t>(m.B));
  m.offsets.push_back(0);
  for (int64_t b = 0; b < m.B; ++b) {
    need[b] = (m.keys(b) + s.page_size - 1) / s.page_size;
    m.num_blocks += need[b];
    m.max_pages = std::max(m.max_pages, need[b] + 1);
    m.T += s.seqs[b].rows;
    m.offsets.push_back(uint32_t(m.T));
    m.cache_lengths.push_back(uint32_t(s.seqs[b].cache_len));
  }
  m.num_blocks += 2;  // pages nobody owns
  std::vector<int32_t> ids(static_cast<std::size_t>(m.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  m.table.assign(std::size_t(m.B * m.max_pages), -1);
  std::size_t next = 0;
  for (int64_t b = 0; b < m.B; ++b)
    for (int64_t p = 0; p < need[b]; ++p) m.table[b * m.max_pages + p] = ids[next++];
  m.buf.resize(std::size_t(m.num_blocks * m.page_bytes()));
  for (uint8_t& x : m.buf) x = uint8_t(rng.uniform_int(0, 255));
  for (int64_t page = 0; page < m.num_blocks; ++page)
    for (int64_t slot = 0; slot < s.page_size; ++slot) {
      if (m.nvfp4()) {
        fill_nvfp4_scales(m.sf(page, slot), m.sf_bytes(), rng, fill);
      } else {
        fill_key_scales(m.sf(page, slot), m.sf_bytes(), rng, fill);
      }
    }
  m.q.resize(std::size_t(m.T * s.H * s.D));
  for (auto& c : m.q) c.bits = random_q(rng, fill);
  m.q_s.resize(std::size_t(m.T * s.H));
  for (float& w : m.q_s)
    w = fill == Fill::kExact ? float(rng.uniform_int(-2, 3)) : rng.normal(0.2f, 1.0f);
  EngineIndexerKCache& c = m.cache;
  c.data = m.buf.data();
  c.num_blocks = m.num_blocks;
  c.page_size = s.page_size;
  c.head_size = s.D;
  c.page_stride_bytes = s.pad == 0 ? 0 : m.page_bytes();
  c.format = format;
  c.global_scale = m.g;
  c.cache_lengths = make_view<const uint32_t>(m.cache_lengths.data(), m.B);
  c.lookup_table = as_uint32_view(make_view<const int32_t>(m.table.data(), m.B, m.max_pages));
  return m;
}

// ------------------------------------------------------------------ the oracle
double e2m1_value(int code) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -kMag[code & 7] : kMag[code & 7];
}

enum class Precision { kFloat, kDouble };

std::vector<int32_t> oracle(Batch& m, Precision precision) {
  const Shape& s = m.s;
  const int64_t nb = m.sf_bytes();
  std::vector<int32_t> out(std::size_t(m.T * s.top_k), -1);
  std::vector<float> krel(static_cast<std::size_t>(s.D));
  for (int64_t b = 0; b < m.B; ++b) {
    for (int64_t i = 0; i < s.seqs[b].rows; ++i) {
      const int64_t r = m.offsets[b] + i;
      const int64_t n = s.mask == MaskType::kCausal ? s.seqs[b].cache_len + i + 1 : m.keys(b);
      std::vector<double> score(static_cast<std::size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t page = m.page_of(b, j), slot = j % s.page_size;
        const uint8_t* codes = m.codes(page, slot);
        const uint8_t* sf = m.sf(page, slot);
        const int mx = *std::max_element(sf, sf + nb);
        for (int64_t d = 0; d < s.D; ++d) {
          const int shift = sf[d / 32] - mx;
          const int code = (codes[d / 2] >> (4 * (d % 2))) & 0xF;
          if (m.nvfp4()) {  // e2m1 * e4m3 scale, exact
            krel[d] = float(e2m1_value(code) * double(e4m3_to_float(sf[d / 16])));
          } else {
            krel[d] = shift < -116 ? 0.0f : float(std::ldexp(e2m1_value(code), shift));
          }
        }
        const double kscale = m.nvfp4()    ? double(1.0f / m.g)
                              : mx == 0xFF ? std::nan("")
                                           : std::ldexp(1.0, mx - 127);
        float acc32 = 0.0f;
        double acc64 = 0.0;
        for (int64_t h = 0; h < s.H; ++h) {
          const float8_e4m3fn* q = &m.q[std::size_t((r * s.H + h) * s.D)];
          const float w = m.q_s[std::size_t(r * s.H + h)];
          float dot32 = 0.0f;
          double dot64 = 0.0;
          for (int64_t d = 0; d < s.D; d += 2) {
            dot32 = std::fma(e4m3_to_float(q[d + 1].bits), krel[d + 1], dot32);
            dot32 = std::fma(e4m3_to_float(q[d].bits), krel[d], dot32);
            dot64 += double(e4m3_to_float(q[d].bits)) * double(krel[d]) +
                     double(e4m3_to_float(q[d + 1].bits)) * double(krel[d + 1]);
          }
          acc32 = std::fma(dot32 > 0.0f || std::isnan(dot32) ? dot32 : 0.0f, w, acc32);
          acc64 += std::max(0.0, dot64) * double(w);
        }
        score[j] = precision == Precision::kFloat ? double(acc32 * float(kscale)) : acc64 * kscale;
      }
      // Score descending, NaN below every number, then position (docs/indexer.md).
      std::vector<int32_t> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
        const bool nx = std::isnan(score[x]), ny = std::isnan(score[y]);
        if (nx || ny) return !nx && ny;
        return score[x] > score[y];
      });
      for (int64_t k = 0; k < std::min(n, s.top_k); ++k) out[r * s.top_k + k] = order[k];
    }
  }
  return out;
}

std::vector<int32_t> run(Batch& m, int threads) {
  std::vector<int32_t> out(static_cast<std::size_t>(m.T * m.s.top_k));
  testing::poison(out);
  MlaIndexerArgs a;
  a.output_indices = make_view<int32_t>(out.data(), m.T, m.s.top_k);
  a.q = make_view<const float8_e4m3fn>(m.q.data(), m.T, m.s.H, m.s.D);
  a.q_s = make_view<const float>(m.q_s.data(), m.T, m.s.H);
  a.input_row_offsets = make_view<const uint32_t>(m.offsets.data(), m.B + 1);
  a.k_cache = &m.cache;
  a.mask = m.s.mask;
  Context ctx;
  ctx.num_threads = threads;
  const Status st = mla_indexer(a, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::vector<Shape> shapes() {
  return {
      {8, 128, 16, 64, 0, {{0, 1}, {63, 1}, {64, 1}, {300, 1}}},           // decode, block edges
      {64, 128, 2048, 64, 12, {{1000, 1}, {255, 1}, {256, 1}}},            // top-k > keys, padded
      {5, 64, 40, 16, 4, {{20, 7}, {0, 0}, {130, 3}}, MaskType::kCausal},  // MTP, empty sequence
      {3, 32, 100, 1, 0, {{0, 70}, {5, 300}}},                             // prefill, page 1
      {4, 160, 33, 7, 0, {{40, 5}, {257, 2}}, MaskType::kNull},            // null mask, odd page
  };
}

// Small shapes with the same edges (key counts around the 64-key block and the 256-key tile, an
// empty sequence, page 1 and odd pages, padding, both masks): the aarch64 CI subset runs these
// under qemu, where the DeepSeek-sized ones take minutes.
std::vector<Shape> small_shapes() {
  return {
      {2, 64, 16, 16, 4, {{0, 1}, {63, 2}, {0, 0}, {257, 1}}},
      {1, 32, 40, 1, 0, {{0, 9}, {5, 3}}},
      {3, 96, 20, 7, 0, {{40, 2}, {64, 1}}, MaskType::kNull},
      {8, 128, 64, 64, 0, {{300, 1}}},
  };
}

constexpr IndexKFormat kFp4Formats[] = {IndexKFormat::kMxfp4, IndexKFormat::kNvfp4};

void expect_exact_oracle(const std::vector<Shape>& list) {
  TestRng rng;
  for (IndexKFormat f : kFp4Formats) {
    for (const Shape& s : list) {
      SCOPED_TRACE(describe(s) + " " + index_k_format_name(f));
      Batch m = make_batch(s, Fill::kExact, rng, f);
      const std::vector<int32_t> expected = oracle(m, Precision::kDouble);
      ASSERT_EQ(expected, oracle(m, Precision::kFloat));  // every sum exact
      testing::for_each_isa([&](IsaLevel) {
        for (int threads : {1, 2}) EXPECT_EQ(run(m, threads), expected) << "threads " << threads;
      });
    }
  }
}

void expect_canonical_order(const std::vector<Shape>& list) {
  TestRng rng;
  for (IndexKFormat f : kFp4Formats) {
    for (Fill fill : {Fill::kRandom, Fill::kSpecial}) {
      for (const Shape& s : list) {
        SCOPED_TRACE(describe(s) + " " + index_k_format_name(f) +
                     (fill == Fill::kSpecial ? " with NaN scales" : ""));
        Batch m = make_batch(s, fill, rng, f);
        const std::vector<int32_t> expected = oracle(m, Precision::kFloat);
        testing::for_each_isa([&](IsaLevel) {
          for (int threads : {1, 2}) EXPECT_EQ(run(m, threads), expected) << "threads " << threads;
        });
      }
    }
  }
}

TEST(IndexerMxfp4, ExactValuesGiveTheDoubleOraclesIndicesOnEveryPath) {
  expect_exact_oracle(shapes());
}
TEST(IndexerMxfp4, RandomValuesGiveTheCanonicalOrdersIndicesOnEveryPath) {
  expect_canonical_order(shapes());
}
TEST(IndexerMxfp4Small, ExactValuesGiveTheDoubleOraclesIndicesOnEveryPath) {
  expect_exact_oracle(small_shapes());
}
TEST(IndexerMxfp4Small, RandomValuesGiveTheCanonicalOrdersIndicesOnEveryPath) {
  expect_canonical_order(small_shapes());
}

// ------------------------------------------------------------------ the K store
// vLLM's insert in double: amax' = max(amax, 6 * 2^-126), e = ceil(log2(fl32(amax' * fl32(1/6)))),
// clamped to [-127, 127]; codes round x * 2^-e to the nearest e2m1 (ties to the even code),
// saturating at 6.
int ref_scale_exponent(const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
  amax = std::max(amax, float(6.0 * std::ldexp(1.0, -126)));
  const float r = amax * (1.0f / 6.0f);
  const double e = std::isinf(r) ? 128.0 : std::ceil(std::log2(double(r)));
  return int(std::clamp(e, -127.0, 127.0));
}
// The nearest e2m1 code (ties to the even code, saturating at 6) of the magnitude v, with x's
// sign; NaN x gives 7.
int ref_code_of(float x, double v) {
  if (std::isnan(x)) return 7;
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double dc = std::fabs(v - e2m1_value(c)), db = std::fabs(v - e2m1_value(best));
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  if (v > 6.0) best = 7;
  return best | (std::signbit(x) ? 8 : 0);
}
int ref_code(float x, int e) { return ref_code_of(x, std::fabs(double(x)) * std::ldexp(1.0, -e)); }

// NVFP4 (contract §5, TensorRT-LLM's recipe) in float steps: sf = e4m3(g * (amax * fl(1/6))),
// out = 1 / (sf * fl(1/g)) (0 when sf is 0), code = e2m1(fl(x * out)). Returns the sf byte.
uint8_t ref_nvfp4_block(const float* x, float g, uint8_t* codes) {
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i)
    if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
  const volatile float scaled_amax = amax * (1.0f / 6.0f);  // volatile: no fused multiply-add
  const uint8_t sf = float_to_e4m3(g * scaled_amax);
  const volatile float inv_g = 1.0f / g;
  const volatile float denom = e4m3_to_float(sf) * inv_g;
  const float out = e4m3_to_float(sf) != 0.0f ? 1.0f / denom : 0.0f;
  for (int i = 0; i < 16; i += 2) {
    const volatile float lo = x[i] * out, hi = x[i + 1] * out;
    codes[i / 2] = uint8_t(ref_code_of(x[i], std::fabs(double(lo))) |
                           (ref_code_of(x[i + 1], std::fabs(double(hi))) << 4));
  }
  return sf;
}

// One row of D values with the cases that matter: ties, saturation, tiny and huge blocks, a
// zero block, NaN and inf.
std::vector<float> store_row(int64_t D, TestRng& rng) {
  std::vector<float> x(static_cast<std::size_t>(D));
  for (int64_t b = 0; b < D / 32; ++b) {
    const int kind = int(rng.uniform_int(0, 6));
    const float scale = std::ldexp(1.0f, int(rng.uniform_int(-20, 20)));
    for (int64_t i = 0; i < 32; ++i) {
      float& v = x[std::size_t(b * 32 + i)];
      switch (kind) {
        case 0:  // the grid's midpoints and points, block amax exactly 6 * 2^k
          v = float(0.25 * double(rng.uniform_int(-24, 24))) * scale;
          if (i == 0) v = 6.0f * scale;
          break;
        case 1:
          v = 0.0f;
          break;
        case 2:
          v = rng.normal(0.0f, 1e-39f);  // subnormal floats
          break;
        case 3:
          v = rng.normal(0.0f, 1e37f);
          if (i == 3) v = 3.3e38f;
          break;
        case 4:
          v = rng.normal(0.0f, 1.0f) * scale;
          if (i == 5) v = std::nanf("");
          if (i == 6) v = -INFINITY;
          break;
        default:
          v = rng.normal(0.0f, 1.0f) * scale;
      }
    }
  }
  return x;
}

// MXFP4: vLLM's insert; NVFP4: the recipe above with the cache's global scale.
TEST(IndexerMxfp4, KStoreWritesVllmsBytesAndNothingElse) {
  TestRng rng;
  for (IndexKFormat f : kFp4Formats) {
    for (const Shape& s : shapes()) {
      SCOPED_TRACE(describe(s) + " " + index_k_format_name(f));
      Batch m = make_batch(s, Fill::kRandom, rng, f);
      std::vector<float> k;
      std::vector<bfloat16> k16;
      for (int64_t t = 0; t < m.T; ++t) {
        const std::vector<float> row = store_row(s.D, rng);
        k.insert(k.end(), row.begin(), row.end());
      }
      for (float& v : k) {
        k16.push_back(bfloat16{float_to_bf16(v)});
      }
      for (bool bf16 : {false, true}) {
        SCOPED_TRACE(bf16 ? "bf16 k" : "fp32 k");
        // Expected buffer: the poisoned one with each new token's slot written.
        std::fill(m.buf.begin(), m.buf.end(), uint8_t(0xEE));
        std::vector<uint8_t> expected = m.buf;
        const std::vector<uint8_t> poisoned = m.buf;
        for (int64_t b = 0; b < m.B; ++b) {
          for (int64_t i = 0; i < s.seqs[b].rows; ++i) {
            const int64_t t = m.offsets[b] + i, pos = s.seqs[b].cache_len + i;
            const int64_t page = m.page_of(b, pos), slot = pos % s.page_size;
            const int64_t co = m.codes_offset(page, slot), so = m.sf_offset(page, slot);
            if (m.nvfp4()) {
              for (int64_t blk = 0; blk < s.D / 16; ++blk) {
                float vals[16];
                for (int j = 0; j < 16; ++j) {
                  const std::size_t idx = std::size_t(t * s.D + blk * 16 + j);
                  vals[j] = bf16 ? bf16_to_float(k16[idx].bits) : k[idx];
                }
                expected[std::size_t(so + blk)] =
                    ref_nvfp4_block(vals, m.g, &expected[std::size_t(co + blk * 8)]);
              }
              continue;
            }
            for (int64_t blk = 0; blk < s.D / 32; ++blk) {
              float vals[32];
              for (int j = 0; j < 32; ++j) {
                const std::size_t idx = std::size_t(t * s.D + blk * 32 + j);
                vals[j] = bf16 ? bf16_to_float(k16[idx].bits) : k[idx];
              }
              const int e = ref_scale_exponent(vals);
              expected[std::size_t(so + blk)] = uint8_t(e + 127);
              for (int j = 0; j < 32; j += 2) {
                expected[std::size_t(co + (blk * 32 + j) / 2)] =
                    uint8_t(ref_code(vals[j], e) | (ref_code(vals[j + 1], e) << 4));
              }
            }
          }
        }
        for (int threads : {1, 2}) {
          m.buf = poisoned;
          IndexerKStoreArgs a;
          if (bf16) {
            a.k_bf16 = make_view<const bfloat16>(k16.data(), m.T, s.D);
          } else {
            a.k = make_view<const float>(k.data(), m.T, s.D);
          }
          a.input_row_offsets = make_view<const uint32_t>(m.offsets.data(), m.B + 1);
          a.k_cache = &m.cache;
          Context ctx;
          ctx.num_threads = threads;
          const Status st = indexer_k_store(a, ctx);
          ASSERT_TRUE(st.ok()) << st.message();
          EXPECT_EQ(m.buf, expected) << "threads " << threads;
          // The front end with nothing to do writes the same bytes.
          IndexerFrontEnd fe;
          fe.rounding = FrontEndRounding::kFloat32;
          a.front_end = &fe;
          m.buf = poisoned;
          ASSERT_TRUE(indexer_k_store(a, ctx).ok());
          EXPECT_EQ(m.buf, expected) << "front end, threads " << threads;
        }
      }
    }
  }
}

// Store K through the K store into an fp8 and an MXFP4 cache and score both: the indices of
// each against the top-k of the unquantised K (fp64 scores of the same q): recall is what the
// MXFP4 cache trades for half the bytes (docs/indexer.md has the demo's figures).
TEST(IndexerMxfp4, StoreThenScoreKeepsMostOfTheFp8CachesRecall) {
  TestRng rng;
  const int64_t H = 16, D = 128, L = 1024, top_k = 64, page = 64;
  Shape s{H, D, top_k, page, 0, {{L - 1, 1}}};
  Batch m = make_batch(s, Fill::kRandom, rng);
  std::vector<float> k(static_cast<std::size_t>(L * D));
  for (float& v : k) v = rng.normal(0.0f, 1.0f);
  // The K store writes position cache_len + i: store all L keys as one prefill of L rows.
  std::vector<uint32_t> offs = {0, uint32_t(L)}, zero = {0};
  std::vector<double> ref(static_cast<std::size_t>(L));
  for (int64_t j = 0; j < L; ++j) {
    double acc = 0;
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d)
        dot += double(e4m3_to_float(m.q[std::size_t(h * D + d)].bits)) *
               double(k[std::size_t(j * D + d)]);
      acc += std::max(0.0, dot) * double(m.q_s[std::size_t(h)]);
    }
    ref[std::size_t(j)] = acc;
  }
  std::vector<int32_t> best(static_cast<std::size_t>(L));
  std::iota(best.begin(), best.end(), 0);
  std::stable_sort(best.begin(), best.end(), [&](int32_t x, int32_t y) { return ref[x] > ref[y]; });
  best.resize(std::size_t(top_k));
  std::sort(best.begin(), best.end());
  double recall[3];  // fp8, mxfp4, nvfp4
  for (IndexKFormat f : {IndexKFormat::kFp8, IndexKFormat::kMxfp4, IndexKFormat::kNvfp4}) {
    EngineIndexerKCache c = m.cache;
    c.format = f;
    float amax = 0.0f;
    for (float v : k) amax = std::max(amax, std::fabs(v));
    c.global_scale = 448.0f * 6.0f / amax;  // the usual NVFP4 per-tensor scale
    c.page_stride_bytes = 0;
    std::vector<uint8_t> buf(std::size_t(c.num_blocks * c.page_bytes()) + 4);
    c.data = buf.data() + (4 - reinterpret_cast<uintptr_t>(buf.data()) % 4) % 4;
    c.cache_lengths = make_view<const uint32_t>(zero.data(), 1);
    IndexerKStoreArgs st;
    st.k = make_view<const float>(k.data(), L, D);
    st.input_row_offsets = make_view<const uint32_t>(offs.data(), 2);
    st.k_cache = &c;
    ASSERT_TRUE(indexer_k_store(st, Context{}).ok());
    c.cache_lengths = m.cache.cache_lengths;  // then one row at position L - 1 sees all L keys
    m.cache = c;
    std::vector<int32_t> got = run(m, 1);
    std::sort(got.begin(), got.end());
    std::vector<int32_t> both;
    std::set_intersection(got.begin(), got.end(), best.begin(), best.end(),
                          std::back_inserter(both));
    recall[int(f)] = double(both.size()) / double(top_k);
  }
  std::printf(
      "recall@%lld vs fp64 scores of unquantised K: fp8 cache %.3f, mxfp4 %.3f, nvfp4 %.3f\n",
      (long long)top_k, recall[0], recall[1], recall[2]);
  EXPECT_GE(recall[0], 0.85);
  EXPECT_GE(recall[1], 0.6);
  EXPECT_GE(recall[2], 0.6);
}

TEST(IndexerMxfp4, BadCachesAreRejectedByName) {
  std::vector<uint8_t> buf(4096);
  std::vector<uint32_t> lens = {0}, table = {0};
  EngineIndexerKCache c;
  c.data = buf.data();
  c.num_blocks = 1;
  c.page_size = 16;
  c.head_size = 48;  // not a multiple of 32
  c.format = IndexKFormat::kMxfp4;
  c.cache_lengths = make_view<const uint32_t>(lens.data(), 1);
  c.lookup_table = make_view<const uint32_t>(table.data(), 1, 1);
  Status st = validate_engine_k_cache(c, "k_cache");
  EXPECT_NE(st.message().find("k_cache.head_size"), std::string::npos) << st.message();
  c.head_size = 64;
  c.page_stride_bytes = 16 * (32 + 2) - 1;
  st = validate_engine_k_cache(c, "k_cache");
  EXPECT_NE(st.message().find("k_cache.page_stride_bytes"), std::string::npos) << st.message();
  c.page_stride_bytes = 16 * (32 + 2) + 1;  // odd strides are fine for bytes
  c.data = buf.data() + 1;
  EXPECT_TRUE(validate_engine_k_cache(c, "k_cache").ok());
  c.format = static_cast<IndexKFormat>(7);
  st = validate_engine_k_cache(c, "k_cache");
  EXPECT_NE(st.message().find("k_cache.format"), std::string::npos) << st.message();
  // The K store: the mxfp4 cache has power-of-two scales only.
  c.format = IndexKFormat::kMxfp4;
  std::vector<float> k(64, 1.0f);
  std::vector<uint32_t> offs = {0, 1};
  IndexerKStoreArgs a;
  a.k = make_view<const float>(k.data(), 1, 64);
  a.input_row_offsets = make_view<const uint32_t>(offs.data(), 2);
  a.k_cache = &c;
  a.scale_mode = ScaleMode::kFloat;
  const std::vector<uint8_t> before = buf;
  st = indexer_k_store(a, Context{});
  EXPECT_NE(st.message().find("scale_mode"), std::string::npos) << st.message();
  EXPECT_EQ(buf, before);
  EXPECT_STREQ(index_k_format_name(IndexKFormat::kMxfp4), "mxfp4");
  EXPECT_STREQ(index_k_format_name(IndexKFormat::kFp8), "fp8");
  EXPECT_STREQ(index_k_format_name(IndexKFormat::kNvfp4), "nvfp4");
  // NVFP4: D a multiple of 16, a finite positive global scale.
  c.format = IndexKFormat::kNvfp4;
  c.page_stride_bytes = 0;
  c.head_size = 40;
  st = validate_engine_k_cache(c, "k_cache");
  EXPECT_NE(st.message().find("k_cache.head_size: expected a multiple of 16"), std::string::npos)
      << st.message();
  c.head_size = 64;
  for (float g : {0.0f, -1.0f, INFINITY, NAN}) {
    c.global_scale = g;
    st = validate_engine_k_cache(c, "k_cache");
    EXPECT_NE(st.message().find("k_cache.global_scale"), std::string::npos) << st.message();
  }
  c.global_scale = 3.0f;
  EXPECT_TRUE(validate_engine_k_cache(c, "k_cache").ok());
}

}  // namespace
}  // namespace quantkv
