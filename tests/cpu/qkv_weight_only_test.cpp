// The weight-only (bf16-activation) mode of the fused QKV: NVFP4, MXFP4 and MXFP8 weights
// against bf16 activations. The scalar reference (tests/reference) is checked against fp64
// (exact mode: equal after the final rounding; random mode: within the documented bound),
// then every ISA path and thread count must give the reference's bits, in the decode path
// (M <= 6) and the panel path, with partial pages, sentinel pages and shuffled page tables.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
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

void check_weight_only_case(const QkvShape& s, TestRng& rng) {
  QkvCase c = qkv_test::make_case(s, rng);
  const std::vector<uint16_t> a = make_activations(c, s.exact, rng);
  std::vector<uint16_t> ref_out(std::size_t(c.m * c.q_dim), 0xA5A5);
  reference::fused_qkv_weight_only_reference(
      make_view(reinterpret_cast<const bfloat16*>(a.data()), c.m, s.k), c.offsets_view(),
      c.weight_view(), c.wscale_view(), s.sf, c.cache.view(), s.layer,
      make_view(reinterpret_cast<bfloat16*>(ref_out.data()), c.m, c.q_dim), s.format);
  const std::vector<uint8_t> ref_blocks = c.cache.raw_blocks();
  // fp32 block sums (SFV terms) and the fma chain over Kb blocks.
  qkv_test::check_against_fp64(
      c, ref_out, ref_blocks,
      [&](int64_t m, int64_t n, double* v, double* abs_sum) {
        exact_element(c, a, m, n, v, abs_sum);
      },
      double(sf_vector_size(s.format) + c.kb_count + 1));
  qkv_test::check_canaries(c, ref_blocks);

  PreparedQkvWeights w;
  ASSERT_TRUE(prepare_qkv_weights(c.weight_view(), c.wscale_view(), s.format, &w, Context{}).ok());
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
