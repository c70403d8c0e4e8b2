// The weight-only (bf16-activation) mode of the fused QKV: NVFP4, MXFP4 and MXFP8 weights
// against bf16 activations. The scalar reference (tests/reference) is checked against fp64
// (exact mode: equal after the final rounding; random mode: within the documented bound),
// then every ISA path and thread count must give the reference's bits, in the decode path
// (M <= 6) and the panel path, with partial pages, sentinel pages and shuffled page tables.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "qkv_test_harness.hpp"
#include "quantkv/qkv_fp4.hpp"

namespace quantkv {
namespace {

using qkv_test::QkvCase;
using qkv_test::QkvShape;
using testing::TestRng;

// bf16 activations [M, K]: exact mode from {0, ±0.5, ..., ±4} (every fp32 partial sum exact);
// random mode Gaussian with a few tiny values (below 2^-110: counted as zero, and bf16
// subnormals) mixed in.
std::vector<uint16_t> make_activations(const QkvCase& c, bool exact, TestRng& rng) {
  std::vector<uint16_t> a(std::size_t(c.m * c.shape.k));
  static const float kSmall[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f};
  for (auto& v : a) {
    float x;
    if (exact) {
      x = kSmall[rng.uniform_int(0, 6)] * (rng.uniform_int(0, 1) ? -1.0f : 1.0f);
    } else if (rng.uniform_int(0, 30) == 0) {
      x = std::ldexp(1.0f, int(rng.uniform_int(-133, -100))) *
          (rng.uniform_int(0, 1) ? -1.0f : 1.0f);
    } else {
      x = rng.normal(0.0f, 2.0f);
    }
    v = float_to_bf16(x);
  }
  return a;
}

// fp64 value of c[m, n] before the section factor and the sum of |terms|.
void exact_element(const QkvCase& c, const std::vector<uint16_t>& a, int64_t m, int64_t n,
                   double* value, double* abs_sum) {
  const BlockFormat f = c.shape.format;
  const int sfv = sf_vector_size(f);
  const int64_t k = c.shape.k, rb = row_bytes(f, k);
  const uint8_t* b = c.weight.data() + n * rb;
  double v = 0, s = 0;
  for (int64_t i = 0; i < k; ++i) {
    const uint8_t code = c.wscale[swizzled_scale_offset(n, i / sfv, c.kb_count)];
    const double sb = has_e8m0_scales(f) ? std::ldexp(1.0, int(code) - 127)
                                         : std::fabs(double(e4m3_to_float(code)));
    double x = bf16_to_float(a[m * k + i]);
    if (std::fabs(x) < 0x1p-110) x = 0;
    const double y = f == BlockFormat::kMXFP8 ? e4m3_to_float(b[i]) : e2m1_to_float(e2m1_get(b, i));
    v += x * y * sb;
    s += std::fabs(x * y * sb);
  }
  *value = v;
  *abs_sum = s;
}

Status run_weight_only(QkvCase& c, const std::vector<uint16_t>& a, const PreparedQkvWeights& w,
                       std::vector<uint16_t>* out, const Context& ctx) {
  return fused_qkv_matmul_weight_only(
      make_view(reinterpret_cast<const bfloat16*>(a.data()), c.m, c.shape.k), c.offsets_view(), w,
      c.shape.sf, c.cache.view(), c.shape.layer,
      make_view(reinterpret_cast<bfloat16*>(out->data()), c.m, c.q_dim), ctx);
}

// The scalar reference's output and cache for activations a.
std::vector<uint16_t> reference_output(QkvCase& c, const std::vector<uint16_t>& a) {
  const QkvShape& s = c.shape;
  std::vector<uint16_t> ref_out(std::size_t(c.m * c.q_dim), 0xA5A5);
  reference::fused_qkv_weight_only_reference(
      make_view(reinterpret_cast<const bfloat16*>(a.data()), c.m, s.k), c.offsets_view(),
      c.weight_view(), c.wscale_view(), s.sf, c.cache.view(), s.layer,
      make_view(reinterpret_cast<bfloat16*>(ref_out.data()), c.m, c.q_dim), s.format);
  return ref_out;
}

// Every ISA path at 1 and 3 threads, outputs and cache poisoned before each run: the
// reference's bits.
void check_every_isa(QkvCase& c, const std::vector<uint16_t>& a,
                     const std::vector<uint16_t>& ref_out, const std::vector<uint8_t>& ref_blocks) {
  PreparedQkvWeights w;
  ASSERT_TRUE(
      prepare_qkv_weights(c.weight_view(), c.wscale_view(), c.shape.format, &w, Context{}).ok());
  testing::for_each_isa([&](IsaLevel) {
    for (int threads : {1, 3}) {
      SCOPED_TRACE("threads = " + std::to_string(threads));
      c.cache.raw_blocks() = c.canary_blocks;
      std::vector<uint16_t> out(ref_out.size(), 0xA5A5);
      Context ctx;
      ctx.num_threads = threads;
      const Status st = run_weight_only(c, a, w, &out, ctx);
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(out == ref_out) << "output differs from the reference";
      EXPECT_TRUE(c.cache.raw_blocks() == ref_blocks) << "cache differs from the reference";
    }
  });
}

void check_weight_only_case(const QkvShape& s, TestRng& rng) {
  QkvCase c = qkv_test::make_case(s, rng);
  const std::vector<uint16_t> a = make_activations(c, s.exact, rng);
  const std::vector<uint16_t> ref_out = reference_output(c, a);
  const std::vector<uint8_t> ref_blocks = c.cache.raw_blocks();
  // fp32 block sums (SFV terms) and the fma chain over Kb blocks.
  qkv_test::check_against_fp64(
      c, ref_out, ref_blocks,
      [&](int64_t m, int64_t n, double* v, double* abs_sum) {
        exact_element(c, a, m, n, v, abs_sum);
      },
      double(sf_vector_size(s.format) + c.kb_count + 1));
  qkv_test::check_canaries(c, ref_blocks);
  check_every_isa(c, a, ref_out, ref_blocks);
}

// One sequence of m new rows after cache_len cached ones, K = k, N = 48 + 2 * 16 (a partial
// pair), per-section scales.
QkvShape one_sequence(BlockFormat format, int64_t k, int64_t m, int64_t cache_len) {
  QkvShape s;
  s.format = format;
  s.k = k;
  s.q_heads = 3;
  s.kv_heads = 1;
  s.head = 16;
  s.page = 4;
  s.seq_lens = {m};
  s.cache_lens = {cache_len};
  s.single_sf = false;
  s.sf = SectionScales{0.37f, 1.9f, 0.011f};
  return s;
}

// One block of a row's bf16 activations (sfv values) of one kind, around the limits of the
// kernels' exact integer blocks (QkvActivations::exact_units: nonzero exponents within 7 of
// each other, the largest below 240, none Inf or NaN; values under 2^-110 count as zero).
enum class BlockKind {
  kSpan7,
  kSpan8,
  kZeros,
  kOneAndTiny,
  kLargest,
  kTooLarge,
  kHuge,
  kSmallest,
  kInf,
  kGaussian,
  kCount
};
void fill_block(BlockKind kind, int sfv, TestRng& rng, uint16_t* out) {
  const int base = int(rng.uniform_int(-20, 20));
  for (int i = 0; i < sfv; ++i) {
    const float sign = rng.uniform_int(0, 1) ? -1.0f : 1.0f;
    const float most = 255.0f / 128.0f;  // the largest bf16 mantissa
    float x = 0.0f;
    switch (kind) {
      case BlockKind::kSpan7:
        x = most * std::ldexp(1.0f, base + i % 8);
        break;
      case BlockKind::kSpan8:
        x = most * std::ldexp(1.0f, base + i % 9);
        break;
      case BlockKind::kZeros:
        x = 0.0f;
        break;
      case BlockKind::kOneAndTiny:
        x = i == 3 ? 1.5f * std::ldexp(1.0f, base) : i % 2 ? std::ldexp(1.0f, -120) : 0.0f;
        break;
      case BlockKind::kLargest:
        x = most * std::ldexp(1.0f, 112 - i % 8);
        break;  // e 239 .. 232
      case BlockKind::kTooLarge:
        x = std::ldexp(1.0f, 113 - i % 4);
        break;  // e 240
      // e 251 and 250, alternating signs: the products are finite (|.| < 2^128), their sums
      // in the bf16 order overflow.
      case BlockKind::kHuge:
        x = most * std::ldexp(1.0f, 124 - i % 2) * (i % 2 ? -1.0f : 1.0f);
        break;
      case BlockKind::kSmallest:
        x = most * std::ldexp(1.0f, -110 + i % 8);
        break;  // e 17 ..
      case BlockKind::kInf:
        x = i == 1 ? INFINITY : std::ldexp(1.0f, base + i % 3);
        break;
      default:
        x = rng.normal(0.0f, 2.0f);
        break;
    }
    out[i] = float_to_bf16(sign * x);
  }
}

// The decode-sized path of the AVX2 weight-only fp4 kernel sums the blocks whose activations
// are exact int16 multiples of a power of two in int32 and takes the bf16 order elsewhere;
// a tile takes the integer sums only where every row's block is such a block. Rows of one
// kind each (M = 1: every kind alone), several kinds per tile (M = 2..4), both fp4 formats:
// every ISA path gives the reference's bits.
TEST(WeightOnlyExactBlocks, AtTheirLimitsGiveTheReferenceBits) {
  TestRng rng;
  constexpr int kKinds = int(BlockKind::kCount);
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4}) {
    const int sfv = sf_vector_size(format);
    for (int64_t m = 1; m <= 4; ++m) {
      for (int first = 0; first < kKinds; ++first) {
        const QkvShape s = one_sequence(format, 6 * sfv, m, 1);
        QkvCase c = qkv_test::make_case(s, rng);
        std::vector<uint16_t> a(std::size_t(m * s.k));
        for (int64_t r = 0; r < m; ++r) {
          const auto kind = BlockKind((first + r) % kKinds);
          for (int64_t kb = 0; kb < s.k / sfv; ++kb) {
            fill_block(kind, sfv, rng, a.data() + r * s.k + kb * sfv);
          }
        }
        SCOPED_TRACE(std::string(format == BlockFormat::kNVFP4 ? "NVFP4" : "MXFP4") +
                     ", M = " + std::to_string(m) + ", first kind " + std::to_string(first));
        const std::vector<uint16_t> ref_out = reference_output(c, a);
        check_every_isa(c, a, ref_out, c.cache.raw_blocks());
      }
    }
  }
}

// Activations whose products with the weight's values may overflow fp32 (|a| up to the
// largest finite bf16, from just under the format's limit: 2^125 for e2m1 weights, whose
// largest value is 6, and 2^119 for e4m3 ones, 448), with random signs, mixed with ordinary
// values. The canonical order rounds each product to fp32 first (+Inf or -Inf), so partial sums
// of opposite overflowing products are NaN; an fma kernel would keep such a product exact
// (finite sums, or +-Inf where the reference has NaN). Every ISA path gives the reference's bits,
// in the decode (M <= 4) and the panel paths; the largest exponent either the limit's (only the
// largest weight values overflow) or the largest finite one.
TEST(WeightOnlyOverflowingProducts, GiveTheReferenceBits) {
  TestRng rng;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    const int sfv = sf_vector_size(format);
    const int limit = format == BlockFormat::kMXFP8 ? 119 : 125;  // the smallest such exponent
    for (const auto& [m, top] :
         {std::pair{1, limit}, {3, limit}, {9, limit}, {1, 127}, {3, 127}, {9, 127}}) {
      const QkvShape s = one_sequence(format, 4 * sfv, m, 2);
      QkvCase c = qkv_test::make_case(s, rng);
      std::vector<uint16_t> a(std::size_t(m * s.k));
      for (auto& v : a) {
        const float sign = rng.uniform_int(0, 1) ? -1.0f : 1.0f;
        const float x = rng.uniform_int(0, 3) == 0
                            ? rng.normal(0.0f, 2.0f)
                            : float(rng.uniform_int(128, 255)) / 128.0f *
                                  std::ldexp(1.0f, int(rng.uniform_int(limit - 2, top)));
        v = float_to_bf16(sign * x);
      }
      SCOPED_TRACE(std::string(block_format_name(format)) + ", M = " + std::to_string(m) +
                   ", largest exponent " + std::to_string(top));
      const std::vector<uint16_t> ref_out = reference_output(c, a);
      check_every_isa(c, a, ref_out, c.cache.raw_blocks());
    }
  }
}

struct WeightOnlyParam {
  BlockFormat format;
  bool exact;
};

class WeightOnly : public ::testing::TestWithParam<WeightOnlyParam> {};

TEST_P(WeightOnly, MatchesTheReferenceOnEveryIsaAndFp64) {
  const auto [format, exact] = GetParam();
  TestRng rng;
  const int sfv = sf_vector_size(format);
  // K below, at and above the block and the 64-byte vector; M of the decode path (1..6,
  // registers only) and the panel path; partial pages, a padding row on a sentinel page.
  for (int64_t k : {int64_t(sfv), int64_t(2 * sfv), int64_t(sfv * 5), int64_t(256 + sfv)}) {
    for (const std::vector<int64_t>& seqs :
         std::vector<std::vector<int64_t>>{{1}, {2, 4}, {7, 0, 13}}) {
      QkvShape s;
      s.format = format;
      s.exact = exact;
      s.k = k;
      s.q_heads = 3;  // N = 48 + 2 * 16 = 80: a partial pair
      s.kv_heads = 1;
      s.head = 16;
      s.page = 4;
      s.seq_lens = seqs;
      s.cache_lens.assign(seqs.size(), 0);
      s.cache_lens[0] = 3;
      s.single_sf = false;
      s.sf = exact ? SectionScales{1.0f, 0.5f, 2.0f} : SectionScales{0.37f, 1.9f, 0.011f};
      if (seqs.size() == 3) s.backed = {-1, -1, 10};  // the last rows of sequence 2: no page
      SCOPED_TRACE("K = " + std::to_string(k) + ", M = " + std::to_string(qkv_test::total_rows(s)));
      check_weight_only_case(s, rng);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, WeightOnly,
                         ::testing::Values(WeightOnlyParam{BlockFormat::kNVFP4, true},
                                           WeightOnlyParam{BlockFormat::kNVFP4, false},
                                           WeightOnlyParam{BlockFormat::kMXFP4, true},
                                           WeightOnlyParam{BlockFormat::kMXFP4, false},
                                           WeightOnlyParam{BlockFormat::kMXFP8, true},
                                           WeightOnlyParam{BlockFormat::kMXFP8, false}));

TEST(WeightOnlyErrors, NamedAndNothingWritten) {
  TestRng rng;
  QkvShape s;
  s.seq_lens = {3};
  QkvCase c = qkv_test::make_case(s, rng);
  std::vector<uint16_t> a = make_activations(c, false, rng);
  PreparedQkvWeights w;
  ASSERT_TRUE(prepare_qkv_weights(c.weight_view(), c.wscale_view(), s.format, &w, Context{}).ok());
  std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0xA5A5);
  const std::vector<uint16_t> poisoned = out;
  auto expect = [&](const Status& st, const std::string& fragment) {
    ASSERT_FALSE(st.ok()) << fragment;
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
    EXPECT_TRUE(out == poisoned);
    EXPECT_TRUE(c.cache.raw_blocks() == c.canary_blocks);
  };
  auto view_a = [&](int64_t k) {
    return make_view(reinterpret_cast<const bfloat16*>(a.data()), c.m, k);
  };
  auto view_out = make_view(reinterpret_cast<bfloat16*>(out.data()), c.m, c.q_dim);
  expect(fused_qkv_matmul_weight_only(view_a(s.k - 2), c.offsets_view(), w, s.sf, c.cache.view(),
                                      s.layer, view_out, Context{}),
         "hidden_state");
  expect(fused_qkv_matmul_weight_only(view_a(s.k), c.offsets_view(), PreparedQkvWeights{}, s.sf,
                                      c.cache.view(), s.layer, view_out, Context{}),
         "not a prepared weight");
  expect(
      fused_qkv_matmul_weight_only(view_a(s.k), c.offsets_view(), w, SectionScales{1.0f, NAN, 1.0f},
                                   c.cache.view(), s.layer, view_out, Context{}),
      "section_sf.k");
  expect(fused_qkv_matmul_weight_only(view_a(s.k), c.offsets_view(), w, s.sf, c.cache.view(), 7,
                                      view_out, Context{}),
         "layer_idx");
  // Issue 15: the output may not overlap what the call reads (the bf16 activations, the
  // prepared weight) or the cache blocks it also writes.
  expect(fused_qkv_matmul_weight_only(
             view_a(s.k), c.offsets_view(), w, s.sf, c.cache.view(), s.layer,
             make_view(reinterpret_cast<bfloat16*>(a.data()), c.m, c.q_dim), Context{}),
         "output: overlaps hidden_state");
  expect(
      fused_qkv_matmul_weight_only(
          view_a(s.k), c.offsets_view(), w, s.sf, c.cache.view(), s.layer,
          make_view(reinterpret_cast<bfloat16*>(static_cast<void*>(const_cast<uint8_t*>(w.data()))),
                    c.m, c.q_dim),
          Context{}),
      "output: overlaps weight.data");
}

}  // namespace
}  // namespace quantkv
