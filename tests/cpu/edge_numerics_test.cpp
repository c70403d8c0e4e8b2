// Numerics at the edges (docs/numerics.md): NaN and inf in q_s, key scales and tensor_sf; fp8
// NaN codes in q and K; all-zero fp4 blocks and zero scales; e8m0 NaN scales; values at
// saturation; subnormal scales. Each case has one defined outcome, checked exactly: the data
// are chosen so every score / product is exact in fp32 (small integer codes, power-of-two
// scales), so the expected result follows from IEEE arithmetic on the contract formulas with no
// tolerance. Every case runs on every ISA path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "robustness_fixtures.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::for_each_isa;
using testing::IndexerFixture;
using testing::QkvFixture;
using testing::TestRng;

constexpr float kNaN = __builtin_nanf("");
constexpr float kInf = __builtin_inff();

// ----------------------------------------------------------------- indexer
// Small integer codes (|v| <= 4), power-of-two key scales and weights: every score exact.
IndexerFixture exact_indexer(TestRng& rng) {
  IndexerFixture f;
  f.top_k = 8;  // more than any row's keys: the -1 tail is part of every check
  f.build(rng.engine()());
  const uint8_t ints[] = {0x00, 0x38, 0x40, 0x44, 0x48, 0xB8, 0xC0, 0xC4, 0xC8};
  for (auto& b : f.cache.raw_blocks()) b = ints[rng.uniform_int(0, 8)];
  for (auto& v : f.q) v.bits = ints[rng.uniform_int(0, 8)];
  for (auto& s : f.cache.raw_scales()) s = std::ldexp(1.0f, int(rng.uniform_int(-2, 2)));
  for (auto& w : f.q_s)
    w = std::ldexp(rng.uniform_int(0, 1) ? 1.0f : -1.0f, int(rng.uniform_int(-1, 1)));
  return f;
}

// contract §3 in double, with the kernels' IEEE semantics: max(0, NaN) = NaN (MAXPS), NaN ranks
// below every number, ties and NaNs by position.
std::vector<int32_t> expected_indices(IndexerFixture& f) {
  std::vector<int32_t> out(size_t(f.T() * f.top_k), -1);
  for (size_t b = 0; b + 1 < f.offs.size(); ++b) {
    const int64_t cache_len = f.cache.cache_length(int64_t(b));
    for (int64_t i = 0; i < int64_t(f.offs[b + 1] - f.offs[b]); ++i) {
      const int64_t t = f.offs[b] + i;
      const int64_t bound =
          f.mask == MaskType::kCausal ? cache_len + i + 1 : cache_len + f.offs[b + 1] - f.offs[b];
      std::vector<double> score(static_cast<size_t>(bound));
      for (int64_t j = 0; j < bound; ++j) {
        double acc = 0;
        for (int64_t h = 0; h < f.H; ++h) {
          double dot = 0;
          for (int64_t d = 0; d < f.D; ++d) {
            dot += double(e4m3_to_float(f.q[size_t((t * f.H + h) * f.D + d)].bits)) *
                   double(f.cache.get(int64_t(b), j, 0, f.layer, 0, d));
          }
          const double relu = 0.0 > dot ? 0.0 : dot;
          acc += relu * double(f.q_s[size_t(t * f.H + h)]);
        }
        // acc is exact in fp32; the key scale is applied by one fp32 multiply, which rounds
        // when the scale is the subnormal 2^-149 and acc has a half (q_s = +-2^-1).
        score[j] = double(float(acc) * f.cache.get_scale(int64_t(b), j, 0, f.layer, 0, 0));
      }
      std::vector<int32_t> order(static_cast<size_t>(bound));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
        const bool nx = std::isnan(score[x]), ny = std::isnan(score[y]);
        if (nx != ny) return ny;
        return !nx && score[x] > score[y];
      });
      for (int64_t r = 0; r < std::min<int64_t>(f.top_k, bound); ++r)
        out[size_t(t * f.top_k + r)] = order[r];
    }
  }
  return out;
}

void expect_indexer_matches_reference(IndexerFixture& f) {
  const auto want = expected_indices(f);
  for_each_isa([&](IsaLevel) {
    for (int threads : {1, 3}) {
      std::fill(f.out.begin(), f.out.end(), -9);
      Context ctx;
      ctx.num_threads = threads;
      const Status st = f.run(ctx);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(f.out, want) << "threads " << threads;
    }
  });
}

// Position of key j of sequence b in the raw buffers.
int64_t key_scale_offset(IndexerFixture& f, int64_t b, int64_t j) {
  const PagedKVCacheCollection c = f.cache.view();
  return c.scale_offset(c.page_of(b, j), 0, f.layer, j % c.page_size, 0, 0);
}
int64_t key_offset(IndexerFixture& f, int64_t b, int64_t j, int64_t d) {
  const PagedKVCacheCollection c = f.cache.view();
  return c.element_offset(c.page_of(b, j), 0, f.layer, j % c.page_size, 0, d);
}

TEST(EdgeNumerics, IndexerBaselineIsExact) {
  TestRng rng;
  auto f = exact_indexer(rng);
  expect_indexer_matches_reference(f);
}

// A NaN weight: 0 * NaN = NaN, so every score of that token is NaN and its row is the first
// min(top_k, key_bound) positions in order; the other rows are untouched.
TEST(EdgeNumerics, IndexerNaNInQs) {
  TestRng rng;
  auto f = exact_indexer(rng);
  f.q_s[1] = kNaN;  // token 0, head 1
  const auto want = expected_indices(f);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(want[size_t(r)], r);  // token 0 sees keys 0..3
  EXPECT_EQ(want[3], 3);
  EXPECT_EQ(want[4], -1);
  expect_indexer_matches_reference(f);
}

// +-inf weights: keys whose dot with that head is positive score +-inf (ranked first / last
// among numbers), keys with dot 0 score NaN (0 * inf), as IEEE says.
TEST(EdgeNumerics, IndexerInfInQs) {
  TestRng rng;
  for (float inf : {kInf, -kInf}) {
    auto f = exact_indexer(rng);
    f.q_s[2] = inf;  // token 1, head 0
    f.q_s[5] = inf;  // token 2, head 1
    expect_indexer_matches_reference(f);
  }
}

// Key scales: NaN ranks the key last; +inf gives +-inf (or NaN for a zero sum); zero gives 0;
// a negative scale flips the key's order; the subnormal 2^-140 keeps every score exact (no
// flush to zero), so the ranking equals the one with scale 1; 2^-149 rounds in the final fp32
// multiply (the reference rounds there too).
TEST(EdgeNumerics, IndexerSpecialKeyScales) {
  TestRng rng;
  for (float s : {kNaN, kInf, -kInf, 0.0f, -0.0f, -1.0f, 0x1p-140f, 0x1p-149f}) {
    SCOPED_TRACE("key scale " + std::to_string(s));
    auto f = exact_indexer(rng);
    f.cache.raw_scales()[size_t(key_scale_offset(f, 0, 1))] = s;
    f.cache.raw_scales()[size_t(key_scale_offset(f, 1, 4))] = s;
    expect_indexer_matches_reference(f);
  }
}

TEST(EdgeNumerics, IndexerSubnormalScalesKeepTheRanking) {
  TestRng rng;
  auto f = exact_indexer(rng);
  for (auto& s : f.cache.raw_scales()) s = 1.0f;
  const auto with_one = expected_indices(f);
  for (auto& s : f.cache.raw_scales()) s = 0x1p-140f;
  EXPECT_EQ(expected_indices(f), with_one);
  expect_indexer_matches_reference(f);  // the kernels agree: subnormals are not flushed
}

// An fp8 NaN code in q makes that head's dot NaN for every key; max(0, NaN) = NaN, so the
// whole row is NaN (positions in order). A NaN code in K makes that key's score NaN.
TEST(EdgeNumerics, IndexerFp8NaNCodes) {
  TestRng rng;
  for (uint8_t nan : {uint8_t(0x7F), uint8_t(0xFF)}) {
    auto f = exact_indexer(rng);
    f.q[size_t((2 * f.H + 1) * f.D + 5)].bits = nan;  // token 2, head 1
    f.cache.raw_blocks()[size_t(key_offset(f, 0, 2, 7))] = nan;
    f.cache.raw_blocks()[size_t(key_offset(f, 1, 0, 0))] = nan;
    const auto want = expected_indices(f);
    for (int r = 0; r < 6; ++r) EXPECT_EQ(want[size_t(2 * f.top_k + r)], r);
    expect_indexer_matches_reference(f);
  }
}

// Saturated codes (+-448) in q and K: dots of 448^2 * D are exact in fp32; nothing overflows.
TEST(EdgeNumerics, IndexerSaturatedCodes) {
  TestRng rng;
  auto f = exact_indexer(rng);
  for (auto& b : f.cache.raw_blocks()) b = rng.uniform_int(0, 1) ? 0x7E : 0xFE;
  for (auto& v : f.q) v.bits = rng.uniform_int(0, 1) ? 0x7E : 0xFE;
  expect_indexer_matches_reference(f);
}

// top_k far above the number of keys (candidate buffers sized by top_k must not overflow or
// be read uninitialised): the keys in order, then -1 to the end of the row.
TEST(EdgeNumerics, IndexerTopKFarAboveKeyCount) {
  TestRng rng;
  auto f = exact_indexer(rng);
  f.top_k = 5000;
  f.out.assign(size_t(f.T() * f.top_k), -9);
  expect_indexer_matches_reference(f);
}

// ----------------------------------------------------------------- K store / Q prepare
TEST(EdgeNumerics, KStoreSpecialRows) {
  for (ScaleMode mode : {ScaleMode::kFloat, ScaleMode::kPowerOfTwo}) {
    testing::KStoreFixture f;
    f.mode = mode;
    f.build(7);
    const int64_t D = f.D;
    // Row 0: a NaN element (ignored by amax, stored as NaN). Row 1: +inf (scale inf: finite
    // elements become +-0, inf/inf = NaN). Row 2: all zero (amax floor 1e-4, codes 0).
    f.k[3] = kNaN;
    f.k[D + 5] = kInf;
    std::fill(f.k.begin() + 2 * D, f.k.begin() + 3 * D, 0.0f);
    float amax0 = 0;
    for (int64_t d = 0; d < D; ++d)
      if (d != 3) amax0 = std::max(amax0, std::fabs(f.k[d]));
    for_each_isa([&](IsaLevel) {
      testing::poison(f.cache.raw_blocks());
      testing::poison(f.cache.raw_scales());
      ASSERT_TRUE(f.run().ok());
      auto pos = [&](int64_t t, int64_t* b, int64_t* p) {
        *b = t < 2 ? 0 : 1;
        *p = f.cache_lens[*b] + (t < 2 ? t : 0);
      };
      int64_t b, p;
      pos(0, &b, &p);
      float s0 = amax0 / 448.0f;
      if (mode == ScaleMode::kPowerOfTwo && (detail::float_bits(s0) & 0x7FFFFF))
        s0 = detail::bits_float(((detail::float_bits(s0) >> 23) + 1) << 23);
      EXPECT_EQ(f.cache.get_scale(b, p, 0, f.layer, 0, 0), s0);
      EXPECT_TRUE(std::isnan(f.cache.get(b, p, 0, f.layer, 0, 3)));
      pos(1, &b, &p);
      EXPECT_EQ(f.cache.get_scale(b, p, 0, f.layer, 0, 0), kInf);
      EXPECT_TRUE(std::isnan(f.cache.get(b, p, 0, f.layer, 0, 5)));
      EXPECT_EQ(f.cache.get(b, p, 0, f.layer, 0, 0), 0.0f);
      pos(2, &b, &p);
      float s2 = 1e-4f / 448.0f;
      if (mode == ScaleMode::kPowerOfTwo)
        s2 = detail::bits_float(((detail::float_bits(s2) >> 23) + 1) << 23);
      EXPECT_EQ(f.cache.get_scale(b, p, 0, f.layer, 0, 0), s2);
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(f.cache.get(b, p, 0, f.layer, 0, d), 0.0f);
    });
  }
}

// Saturation: with s = amax / 448 the largest element lands on +-448 (code 0x7E / 0xFE), never
// NaN; with power-of-two scales every code stays within +-448.
TEST(EdgeNumerics, KStoreSaturation) {
  testing::KStoreFixture f;
  f.mode = ScaleMode::kFloat;
  f.build(11);
  f.k[0] = -3.0e38f;  // near FLT_MAX: amax / 448 is still finite
  ASSERT_TRUE(f.run().ok());
  const int64_t p = f.cache_lens[0];
  EXPECT_EQ(f.cache.get(0, p, 0, f.layer, 0, 0), -448.0f);
}

TEST(EdgeNumerics, QPrepareSpecialWeights) {
  testing::QPrepareFixture f;
  f.build(3);
  f.w[0] = kNaN;
  f.w[1] = kInf;
  f.w[2] = 0.0f;
  f.q[size_t(3 * f.D + 1)] = kNaN;  // (token 1, head 1): NaN element, ignored by amax
  ASSERT_TRUE(f.run().ok());
  EXPECT_TRUE(std::isnan(f.q_s[0]));
  EXPECT_EQ(f.q_s[1], kInf);
  EXPECT_EQ(f.q_s[2], 0.0f);
  EXPECT_TRUE(std::isfinite(f.q_s[3]));
  EXPECT_EQ(f.q8[size_t(3 * f.D + 1)].bits & 0x7F, 0x7F);
}

// ----------------------------------------------------------------- fused QKV
// Power-of-two block scales: every block product and sum is exact in fp32, so the expected
// bf16 output is the RNE of the exact value and the cache holds its conversion.
QkvFixture exact_qkv(BlockFormat format, DType dtype = DType::kBF16,
                     std::vector<int64_t> seq_lens = {2, 1}) {
  QkvFixture f;
  f.format = format;
  f.cache_dtype = dtype;
  f.seq_lens = std::move(seq_lens);
  f.build(99);
  if (format == BlockFormat::kMXFP8) {  // small integer e4m3 codes: block sums exact in fp32
    const uint8_t ints[] = {0x00, 0x38, 0x40, 0x44, 0x48, 0xB8, 0xC0, 0xC4, 0xC8};
    for (size_t i = 0; i < f.hidden.size(); ++i) f.hidden[i] = ints[(i * 7 + 3) % 9];
    for (size_t i = 0; i < f.weight.size(); ++i) f.weight[i] = ints[(i * 5 + 1) % 9];
  }
  auto pow2 = [&](int e) {
    return has_e8m0_scales(format) ? uint8_t(127 + e) : uint8_t(0x38 + 8 * e);
  };
  for (int64_t r = 0; r < f.M(); ++r)
    for (int64_t c = 0; c < f.kb(); ++c)
      f.input_scale[swizzled_scale_offset(r, c, f.kb())] = pow2(int(r % 3) - 1);
  for (int64_t r = 0; r < f.N(); ++r)
    for (int64_t c = 0; c < f.kb(); ++c)
      f.weight_scale[swizzled_scale_offset(r, c, f.kb())] = pow2(int(c % 2));
  return f;
}

double exact_c(QkvFixture& f, int64_t m, int64_t n) {
  const int sfv = sf_vector_size(f.format);
  const int64_t rb = row_bytes(f.format, f.K);
  auto val = [&](const std::vector<uint8_t>& buf, int64_t r, int64_t k) {
    const uint8_t* row = buf.data() + r * rb;
    return f.format == BlockFormat::kMXFP8 ? double(e4m3_to_float(row[k]))
                                           : double(e2m1_to_float(e2m1_get(row, k)));
  };
  auto scale = [&](const std::vector<uint8_t>& s, int64_t r, int64_t c) {
    const uint8_t code = s[swizzled_scale_offset(r, c, f.kb())];
    return has_e8m0_scales(f.format) ? double(e8m0_to_float(code))
                                     : double(e4m3_to_float(code & 0x7F));
  };
  double acc = 0;
  for (int64_t c = 0; c < f.kb(); ++c) {
    double part = 0;
    for (int i = 0; i < sfv; ++i)
      part += val(f.hidden, m, c * sfv + i) * val(f.weight, n, c * sfv + i);
    acc += part * scale(f.input_scale, m, c) * scale(f.weight_scale, n, c);
  }
  return double(f.tensor_sf) * acc;
}

// Runs the fixture on every ISA and checks output and cache against exact_c, value by value:
// `expect(m, n, got)` decides for special cases, else bitwise equality with the rounded value.
void check_qkv(QkvFixture& f) {
  const int64_t kv_width = f.num_kv_heads * f.head_size;
  for_each_isa([&](IsaLevel) {
    testing::poison(f.out);  // unwritten elements show
    testing::poison(f.cache.raw_blocks());
    ASSERT_TRUE(f.run().ok());
    for (int64_t m = 0; m < f.M(); ++m) {
      for (int64_t n = 0; n < f.N(); ++n) {
        const float want = float(exact_c(f, m, n));
        float got;
        if (n < f.q_dim) {
          got = bf16_to_float(f.out[size_t(m * f.q_dim + n)].bits);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << m << "," << n;
            continue;
          }
          EXPECT_EQ(f.out[size_t(m * f.q_dim + n)].bits, float_to_bf16(want))
              << "output " << m << "," << n;
        } else {
          int64_t b = m < f.offs[1] ? 0 : 1;
          const int64_t pos = f.cache.cache_length(b) + m - f.offs[b];
          const int64_t col = n - f.q_dim;
          got = f.cache.get(b, pos, col / kv_width, f.layer, (col % kv_width) / f.head_size,
                            col % f.head_size);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << m << "," << n;
            continue;
          }
          std::vector<uint8_t> tmp(4);
          store_from_float(tmp.data(), f.cache_dtype, 0, want);
          EXPECT_EQ(got, load_as_float(tmp.data(), f.cache_dtype, 0)) << "cache " << m << "," << n;
        }
      }
    }
  });
}

TEST(EdgeNumerics, QkvBaselineIsExact) {
  for (BlockFormat fmt : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    SCOPED_TRACE(block_format_name(fmt));
    auto f = exact_qkv(fmt);
    check_qkv(f);
  }
}

// A NaN block scale (e4m3 0x7F / 0xFF, e8m0 0xFF) makes every output it touches NaN: an input
// scale poisons its row (Q and the row's K/V in the cache), a weight scale its column.
TEST(EdgeNumerics, QkvNaNBlockScales) {
  for (BlockFormat fmt : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (DType dtype : {DType::kBF16, DType::kE4M3}) {
      SCOPED_TRACE(std::string(block_format_name(fmt)) + " " + dtype_name(dtype));
      auto f = exact_qkv(fmt, dtype);
      const uint8_t nan =
          has_e8m0_scales(fmt) ? 0xFF : 0xFF;  // e4m3: 0xFF is -NaN, the sign is ignored
      f.input_scale[swizzled_scale_offset(1, 0, f.kb())] = nan;
      f.weight_scale[swizzled_scale_offset(2, f.kb() - 1, f.kb())] =
          has_e8m0_scales(fmt) ? 0xFF : 0x7F;
      f.weight_scale[swizzled_scale_offset(f.q_dim + 3, 0, f.kb())] =
          has_e8m0_scales(fmt) ? 0xFF : 0x7F;
      check_qkv(f);
      EXPECT_TRUE(std::isnan(bf16_to_float(f.out[size_t(1 * f.q_dim + 5)].bits)));
      EXPECT_TRUE(std::isnan(bf16_to_float(f.out[size_t(0 * f.q_dim + 2)].bits)));
      EXPECT_FALSE(std::isnan(bf16_to_float(f.out[size_t(0 * f.q_dim + 5)].bits)));
    }
  }
}

// Zero scales (e4m3 0x00 and 0x80, i.e. -0) and all-zero fp4 blocks give exact zeros; e8m0
// has no zero: its smallest code 0x00 is 2^-127, a subnormal float, honoured exactly.
TEST(EdgeNumerics, QkvZeroScalesAndZeroBlocks) {
  for (BlockFormat fmt : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    SCOPED_TRACE(block_format_name(fmt));
    auto f = exact_qkv(fmt);
    const int64_t rb = row_bytes(fmt, f.K);
    std::fill(f.hidden.begin(), f.hidden.begin() + rb, uint8_t(0));  // row 0: all-zero data
    for (int64_t c = 0; c < f.kb(); ++c) {
      f.input_scale[swizzled_scale_offset(1, c, f.kb())] =
          has_e8m0_scales(fmt) ? 0x00 : uint8_t(c % 2 ? 0x80 : 0x00);
    }
    check_qkv(f);
    for (int64_t n = 0; n < f.q_dim; ++n) EXPECT_EQ(bf16_to_float(f.out[size_t(n)].bits), 0.0f);
    if (!has_e8m0_scales(fmt)) {
      for (int64_t n = 0; n < f.q_dim; ++n)
        EXPECT_EQ(bf16_to_float(f.out[size_t(f.q_dim + n)].bits), 0.0f);
    }
  }
}

// Subnormal e4m3 block scales (codes 0x01..0x07 = k * 2^-9) are exact, not flushed.
TEST(EdgeNumerics, QkvSubnormalE4M3Scales) {
  auto f = exact_qkv(BlockFormat::kNVFP4);
  for (int64_t c = 0; c < f.kb(); ++c)
    f.input_scale[swizzled_scale_offset(2, c, f.kb())] = uint8_t(1 + c % 7);
  for (int64_t c = 0; c < f.kb(); ++c) f.weight_scale[swizzled_scale_offset(0, c, f.kb())] = 0x01;
  check_qkv(f);
  EXPECT_NE(f.out[size_t(2 * f.q_dim + 1)].bits & 0x7FFF, 0);
}

// Saturation: the largest data (e2m1 +-6, e4m3 +-448) and scales (e4m3 448, e8m0 2^10): the
// bf16 output is exact-then-rounded, an e4m3 cache saturates to +-448 (never NaN), an fp16 cache
// rounds to +-inf beyond 65504 (IEEE RNE overflow).
TEST(EdgeNumerics, QkvSaturation) {
  for (BlockFormat fmt : {BlockFormat::kNVFP4, BlockFormat::kMXFP8}) {
    for (DType dtype : {DType::kE4M3, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(std::string(block_format_name(fmt)) + " " + dtype_name(dtype));
      auto f = exact_qkv(fmt, dtype);
      const uint8_t big = fmt == BlockFormat::kMXFP8 ? 0x7E : 0x77;      // 448 | (6, 6)
      const uint8_t big_neg = fmt == BlockFormat::kMXFP8 ? 0xFE : 0xFF;  // -448 | (-6, -6)
      std::fill(f.hidden.begin(), f.hidden.end(), big);
      for (size_t i = 0; i < f.weight.size(); ++i) f.weight[i] = (i / 32) % 2 ? big_neg : big;
      for (auto& s : f.input_scale)
        if (s) s = fmt == BlockFormat::kMXFP8 ? 137 : 0x7E;
      check_qkv(f);
      if (dtype == DType::kE4M3) {
        EXPECT_EQ(std::fabs(f.cache.get(0, f.cache.cache_length(0), 0, f.layer, 0, 0)), 448.0f);
      }
    }
  }
}

// An e4m3 block scale's sign bit is ignored (UE4M3, as MAX's reference).
TEST(EdgeNumerics, QkvScaleSignBitIgnored) {
  auto f = exact_qkv(BlockFormat::kNVFP4);
  ASSERT_TRUE(f.run().ok());
  const auto plain = f.out;
  for (auto& s : f.input_scale) s |= 0x80;
  ASSERT_TRUE(f.run().ok());
  EXPECT_EQ(0, std::memcmp(plain.data(), f.out.data(), plain.size() * 2));
}

// fp8 NaN codes in MXFP8 data poison the outputs of their row.
TEST(EdgeNumerics, QkvMxfp8NaNData) {
  auto f = exact_qkv(BlockFormat::kMXFP8);
  f.hidden[size_t(2 * f.K + 7)] = 0x7F;
  check_qkv(f);
  for (int64_t n = 0; n < f.q_dim; ++n)
    EXPECT_TRUE(std::isnan(bf16_to_float(f.out[size_t(2 * f.q_dim + n)].bits)));
}

// NaN weight codes (0x7F, 0xFF): every output of their columns is NaN (Q and cache), the
// others exact, at 3 rows (the decode-sized kernels, which decode the weight in registers) and
// at 7 (the panel kernels), on every ISA level.
TEST(EdgeNumerics, QkvMxfp8NaNWeight) {
  for (std::vector<int64_t> seq_lens : {std::vector<int64_t>{2, 1}, std::vector<int64_t>{4, 3}}) {
    auto f = exact_qkv(BlockFormat::kMXFP8, DType::kBF16, seq_lens);
    SCOPED_TRACE(f.M());
    f.weight[size_t(1 * f.K + 5)] = 0x7F;               // a Q column, block 0
    f.weight[size_t((f.q_dim + 2) * f.K + 40)] = 0xFF;  // a K column, block 1
    check_qkv(f);
    for (int64_t m = 0; m < f.M(); ++m) {
      EXPECT_TRUE(std::isnan(bf16_to_float(f.out[size_t(m * f.q_dim + 1)].bits))) << m;
      EXPECT_FALSE(std::isnan(bf16_to_float(f.out[size_t(m * f.q_dim)].bits))) << m;
    }
  }
}

// ----------------------------------------------------------------- quantize
// NaN elements: skipped by the block max (fmax), encoded as e2m1 6 (code 7; e2m1 has no NaN) or
// e4m3 NaN. Inf elements: the block max is inf, NVFP4's scale saturates to 448 (0x7E), the MX
// scale to 2^127 (0xFE); the inf itself becomes +-6 / +-448. All-zero blocks: scale 0 (NVFP4)
// or 2^-127 (code 0, MX) and zero data. Values beyond the format saturate.
TEST(EdgeNumerics, QuantizeSpecials) {
  for (BlockFormat fmt : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    SCOPED_TRACE(block_format_name(fmt));
    testing::QuantizeFixture f;
    f.format = fmt;
    f.K = 64;
    f.build(5);
    const int sfv = sf_vector_size(fmt);
    f.x[3] = kNaN;                                                        // row 0, block 0
    f.x[size_t(f.K + 1)] = -kInf;                                         // row 1, block 0
    std::fill(f.x.begin() + 2 * f.K, f.x.begin() + 2 * f.K + sfv, 0.0f);  // row 2, block 0
    f.global_scale = 448.0f * 6.0f / 1000.0f;  // a global amax 1000x too small: saturation
    if (fmt == BlockFormat::kNVFP4) f.global_scale *= 1000.0f * 1000.0f;
    ASSERT_TRUE(f.run().ok());
    const int64_t kb = f.K / sfv, rb = row_bytes(fmt, f.K);
    auto code_of = [&](int64_t r, int64_t i) {
      const uint8_t* row = f.data.data() + r * rb;
      return fmt == BlockFormat::kMXFP8 ? row[i] : e2m1_get(row, i);
    };
    auto scale = [&](int64_t r, int64_t c) { return f.scales[swizzled_scale_offset(r, c, kb)]; };
    // NaN element.
    if (fmt == BlockFormat::kMXFP8)
      EXPECT_EQ(code_of(0, 3) & 0x7F, 0x7F);
    else
      EXPECT_EQ(code_of(0, 3), 0x7);
    // -inf element and its block's scale.
    EXPECT_EQ(scale(1, 0), fmt == BlockFormat::kNVFP4 ? 0x7E : 0xFE);
    EXPECT_EQ(code_of(1, 1), fmt == BlockFormat::kMXFP8 ? 0xFE : 0xF);
    // All-zero block.
    EXPECT_EQ(scale(2, 0), 0x00);
    for (int i = 0; i < sfv; ++i) EXPECT_EQ(code_of(2, i), 0);
    // NVFP4 with a far too large global multiplier: every scale saturates to 448 and the
    // data to +-6.
    if (fmt == BlockFormat::kNVFP4) {
      EXPECT_EQ(scale(0, 1), 0x7E);
      int saturated = 0;
      for (int64_t i = sfv; i < 2 * sfv; ++i) saturated += (code_of(0, i) & 7) == 7;
      EXPECT_GT(saturated, sfv / 2);
    }
    // Padding of the scales is zero.
    for (int64_t r = f.M; r < 128; ++r) EXPECT_EQ(f.scales[swizzled_scale_offset(r, 0, kb)], 0);
  }
}

// Subnormal inputs are not flushed: a block of float subnormals gets the scale and codes of the
// recipe computed with plain IEEE arithmetic.
TEST(EdgeNumerics, QuantizeSubnormalInputs) {
  for (BlockFormat fmt : {BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    testing::QuantizeFixture f;
    f.format = fmt;
    f.M = 1;
    f.K = 32;
    f.build(1);
    for (int i = 0; i < 32; ++i) f.x[size_t(i)] = std::ldexp(float(i % 7 - 3), -133);
    ASSERT_TRUE(f.run().ok());
    const uint8_t sf =
        float_to_e8m0(std::ldexp(3.0f, -133) / (fmt == BlockFormat::kMXFP8 ? 448.0f : 6.0f));
    EXPECT_EQ(f.scales[0], sf);
    const float s = e8m0_to_float(sf);
    for (int i = 0; i < 32; ++i) {
      const uint8_t want = fmt == BlockFormat::kMXFP8 ? float_to_e4m3(f.x[size_t(i)] / s)
                                                      : float_to_e2m1(f.x[size_t(i)] / s);
      const uint8_t got =
          fmt == BlockFormat::kMXFP8 ? f.data[size_t(i)] : e2m1_get(f.data.data(), i);
      EXPECT_EQ(got, want) << i;
    }
    EXPECT_NE(f.data[1], 0);
  }
}

}  // namespace
}  // namespace quantkv
