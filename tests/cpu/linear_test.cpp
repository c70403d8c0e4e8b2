// The plain block-scaled linear layer (quantkv/linear.hpp): every ISA path and thread count
// gives the scalar reference's bits (W4A4 NVFP4 / MXFP4, MXFP8, and the weight-only modes), for
// M below / at / above the register tiles, K below / at / above the block and the 64-byte
// vector, N below / at / above the 32-column pair; outputs are poisoned before each run. The
// linear's rows equal the fused QKV's Q columns for the same data, bit for bit (one GEMM core),
// and weights prepared from row-major scales equal those prepared from swizzled ones.
#include "quantkv/linear.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qkv_test_harness.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "reference/linear_reference.hpp"

namespace quantkv {
namespace {

using qkv_test::QkvCase;
using qkv_test::QkvShape;
using testing::TestRng;

// bf16 activations [M, K]: Gaussian with exponents spread over 2^±12, so that the fp32 block
// sums round (with same-sized values they are mostly exact, and any summation order would
// pass), and a few tiny values (below 2^-110: counted as zero).
std::vector<uint16_t> bf16_activations(int64_t m, int64_t k, TestRng& rng) {
  std::vector<uint16_t> a(std::size_t(m * k));
  for (auto& v : a) {
    const float x = rng.uniform_int(0, 30) == 0
                        ? std::ldexp(1.0f, int(rng.uniform_int(-133, -100)))
                        : std::ldexp(rng.normal(0.0f, 2.0f), int(rng.uniform_int(-12, 12)));
    v = float_to_bf16(x);
  }
  return a;
}

// The weight's inputs: a QkvCase supplies random codes and scales of the format (its cache is
// unused here); q_heads x 16 + 2 x 16 columns.
QkvCase make_weight_case(BlockFormat format, int64_t m, int64_t k, int64_t q_heads, TestRng& rng) {
  QkvShape s;
  s.format = format;
  s.k = k;
  s.q_heads = q_heads;
  s.kv_heads = 1;
  s.head = 16;
  s.seq_lens = {m};
  return qkv_test::make_case(s, rng);
}

struct Options {
  bool weight_only = false;
  bool f32_out = false;
  int bias = 0;  // 0 none, 1 fp32, 2 bf16
  bool column_alpha = false;
};

void check_linear(BlockFormat format, int64_t m, int64_t k, int64_t q_heads, const Options& o,
                  TestRng& rng) {
  QkvCase c = make_weight_case(format, m, k, q_heads, rng);
  const int64_t n = c.n;
  SCOPED_TRACE("M = " + std::to_string(m) + ", K = " + std::to_string(k) +
               ", N = " + std::to_string(n) + (o.weight_only ? ", bf16 x" : ", quantised x") +
               (o.f32_out ? ", fp32 y" : ", bf16 y") + ", bias " + std::to_string(o.bias) +
               (o.column_alpha ? ", column_alpha" : ""));
  const std::vector<uint16_t> xb = bf16_activations(m, k, rng);
  std::vector<float> alphas(static_cast<std::size_t>(n)), bias(static_cast<std::size_t>(n));
  std::vector<uint16_t> bias16(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    alphas[i] = rng.uniform_float(0.01f, 3.0f);
    bias[i] = rng.normal(0.0f, 4.0f);
    bias16[i] = float_to_bf16(rng.normal(0.0f, 4.0f));
  }
  const float alpha = 0.37f;

  reference::LinearReferenceArgs r;
  r.format = format;
  r.m = m;
  r.n = n;
  r.k = k;
  if (o.weight_only) {
    r.x_bf16 = xb.data();
  } else {
    r.x = c.hidden.data();
    r.x_scale = c.iscale_view();
  }
  r.weight = c.weight.data();
  r.weight_scale = c.wscale_view();
  r.alpha = alpha;
  r.column_alpha = o.column_alpha ? alphas.data() : nullptr;
  r.bias = o.bias == 1 ? bias.data() : nullptr;
  r.bias_bf16 = o.bias == 2 ? bias16.data() : nullptr;
  std::vector<uint16_t> ref16(std::size_t(m * n));
  std::vector<float> ref32(std::size_t(m * n));
  if (o.f32_out) {
    r.y_f32 = ref32.data();
  } else {
    r.y = ref16.data();
  }
  reference::linear_reference(r);

  PreparedWeights w;
  ASSERT_TRUE(prepare_weights({c.weight_view(), c.wscale_view(), {}, format}, &w, Context{}).ok());
  testing::for_each_isa([&](IsaLevel) {
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE("threads = " + std::to_string(threads));
      std::vector<uint16_t> y16(std::size_t(m * n));
      std::vector<float> y32(std::size_t(m * n));
      testing::poison(y16);
      testing::poison(y32);
      LinearArgs a;
      if (o.weight_only) {
        a.x_bf16 = make_view(reinterpret_cast<const bfloat16*>(xb.data()), m, k);
      } else {
        a.x = c.hidden_view();
        a.x_scale = c.iscale_view();
      }
      a.weight = &w;
      a.alpha = alpha;
      if (o.column_alpha) a.column_alpha = make_view<const float>(alphas.data(), n);
      if (o.bias == 1) a.bias = make_view<const float>(bias.data(), n);
      if (o.bias == 2) {
        a.bias_bf16 = make_view(reinterpret_cast<const bfloat16*>(bias16.data()), n);
      }
      if (o.f32_out) {
        a.y_f32 = make_view(y32.data(), m, n);
      } else {
        a.y = make_view(reinterpret_cast<bfloat16*>(y16.data()), m, n);
      }
      Context ctx;
      ctx.num_threads = threads;
      const Status st = linear(a, ctx);
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (o.f32_out) {
        EXPECT_TRUE(y32.empty() ||
                    std::memcmp(y32.data(), ref32.data(), y32.size() * sizeof(float)) == 0)
            << "fp32 output differs from the reference";
      } else {
        EXPECT_TRUE(y16 == ref16) << "bf16 output differs from the reference";
      }
    }
  });
}

class LinearFormats : public ::testing::TestWithParam<BlockFormat> {};

TEST_P(LinearFormats, EveryIsaAndThreadCountGivesTheReferenceBits) {
  const BlockFormat format = GetParam();
  TestRng rng;
  const int sfv = sf_vector_size(format);
  // M: empty, decode (1), the AVX2 decode-sized limit (4: one weight-only tile of 4 rows, two
  // w4a4 tiles of 2), one register tile (6), above it (7), the AVX-512 direct-decode limit (18)
  // and the panel path (19, 40). K: one block, two, five, above the 64-byte vector. N: 48 (one and
  // a half pairs), 80, 16 (below one pair).
  for (int64_t m : {0, 1, 4, 6, 7, 18, 19, 40}) {
    for (int64_t k : {int64_t(sfv), int64_t(2 * sfv), int64_t(5 * sfv), int64_t(256 + sfv)}) {
      for (bool weight_only : {false, true}) {
        Options o;
        o.weight_only = weight_only;
        o.bias = int(m % 3);
        // fp32 out also where the weight-only block sums are longest: a bf16 y hides most
        // one-ulp differences of their fp32 order.
        o.f32_out = k == 2 * sfv || (weight_only && k == 256 + sfv);
        o.column_alpha = m == 7 || m == 19;
        check_linear(format, m, k, m == 1 ? 0 : 1, o, rng);  // N = 32 or 48
      }
    }
  }
  Options o;
  check_linear(format, 5, int64_t(4 * sfv), 3, o, rng);  // N = 80
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearFormats,
                         ::testing::Values(BlockFormat::kNVFP4, BlockFormat::kMXFP4,
                                           BlockFormat::kMXFP8),
                         [](const auto& info) {
                           return std::string(block_format_name(info.param));
                         });

// The GEMM driver hands out chunks of 2-8 column pairs sized by the pairs per thread (a whole job
// at one thread): 74 pairs (N = 2368) run as one chunk at 1 thread, chunks of 4 at 2 threads and
// of 3 at 3, each with a shorter last chunk, through the direct-decode kernels (M = 1) and the
// panels (M = 19); K = 1344 gives even M = 1 the 3M multiply-adds that three threads need
// (kMinMacsPerThread). A suite of its own: the CI's qemu-aarch64 subset leaves it out (it took over
// 10 minutes emulated); the chunking is the same driver code on every ISA.
class LinearChunks : public ::testing::TestWithParam<BlockFormat> {};

TEST_P(LinearChunks, ManyPairsGiveTheReferenceBits) {
  const BlockFormat format = GetParam();
  TestRng rng;
  for (int64_t m : {1, 19}) {
    for (bool weight_only : {false, true}) {
      Options o;
      o.weight_only = weight_only;
      check_linear(format, m, 1344, 146, o, rng);  // N = 2368
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearChunks,
                         ::testing::Values(BlockFormat::kNVFP4, BlockFormat::kMXFP4,
                                           BlockFormat::kMXFP8),
                         [](const auto& info) {
                           return std::string(block_format_name(info.param));
                         });

// One GEMM core: for the same data the linear layer's rows are the fused QKV's Q columns bit
// for bit (W4A4 and weight-only), and its K/V columns are what the cache got (bf16 cache).
TEST(LinearMatchesFusedQkv, QColumnsBitForBit) {
  TestRng rng;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (bool weight_only : {false, true}) {
      QkvShape s;
      s.format = format;
      s.k = 4 * sf_vector_size(format);
      s.q_heads = 3;
      s.seq_lens = {5, 9};
      s.cache_lens = {0, 0};
      s.single_sf = false;
      // MXFP8's W8A8 call takes no factor but 1 (contract §4).
      const float sf = format == BlockFormat::kMXFP8 ? 1.0f : 0.37f;
      s.sf = SectionScales{sf, sf, sf};
      QkvCase c = qkv_test::make_case(s, rng);
      const std::vector<uint16_t> xb = bf16_activations(c.m, s.k, rng);
      PreparedWeights w;
      ASSERT_TRUE(prepare_qkv_weights(c.weight_view(), c.wscale_view(), format, &w, {}).ok());
      std::vector<uint16_t> q(std::size_t(c.m * c.q_dim), 0xA5A5);
      const auto q_view = make_view(reinterpret_cast<bfloat16*>(q.data()), c.m, c.q_dim);
      const auto xb_view = make_view(reinterpret_cast<const bfloat16*>(xb.data()), c.m, s.k);
      const Status fused = weight_only
                               ? fused_qkv_matmul_weight_only(xb_view, c.offsets_view(), w, s.sf,
                                                              c.cache.view(), s.layer, q_view, {})
                               : generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                                     c.hidden_view(), c.offsets_view(), w, c.iscale_view(), s.sf,
                                     c.cache.view(), s.layer, q_view, {});
      ASSERT_TRUE(fused.ok()) << fused.to_string();

      std::vector<uint16_t> y(std::size_t(c.m * c.n), 0xA5A5);
      LinearArgs a;
      if (weight_only) {
        a.x_bf16 = xb_view;
      } else {
        a.x = c.hidden_view();
        a.x_scale = c.iscale_view();
      }
      a.weight = &w;
      a.alpha = sf;
      a.y = make_view(reinterpret_cast<bfloat16*>(y.data()), c.m, c.n);
      const Status st = linear(a, {});
      ASSERT_TRUE(st.ok()) << st.to_string();
      for (int64_t m = 0; m < c.m; ++m) {
        for (int64_t n = 0; n < c.q_dim; ++n) {
          ASSERT_EQ(y[m * c.n + n], q[m * c.q_dim + n])
              << block_format_name(format) << (weight_only ? " weight-only" : "") << " m " << m
              << " n " << n;
        }
      }
      // K of row m sits at its cache position (cache_lens are 0: position = row in sequence).
      const PagedKVCacheCollection kv = c.cache.view();
      for (int64_t b = 0; b < 2; ++b) {
        for (uint32_t row = c.offsets[b]; row < c.offsets[b + 1]; ++row) {
          const int64_t pos = row - c.offsets[b];
          const uint32_t page = kv.page_of(b, pos);
          const uint16_t* k_slot = static_cast<const uint16_t*>(kv.blocks) +
                                   kv.element_offset(page, 0, s.layer, pos % kv.page_size, 0, 0);
          for (int64_t i = 0; i < c.kv_width; ++i) {
            ASSERT_EQ(k_slot[i], y[row * c.n + c.q_dim + i]) << "K row " << row << " col " << i;
          }
        }
      }
    }
  }
}

// Row-major scales (as checkpoints store them) pack to the same prepared weight as swizzled.
TEST(PrepareWeights, RowMajorScalesEqualSwizzled) {
  TestRng rng;
  for (BlockFormat format : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    for (int64_t k : {int64_t(sf_vector_size(format)), int64_t(320)}) {
      QkvCase c = make_weight_case(format, 1, k, 5, rng);  // N = 112
      std::vector<uint8_t> rows(std::size_t(c.n * c.kb_count));
      for (int64_t n = 0; n < c.n; ++n)
        for (int64_t kb = 0; kb < c.kb_count; ++kb)
          rows[n * c.kb_count + kb] = c.wscale[swizzled_scale_offset(n, kb, c.kb_count)];
      PreparedWeights a, b;
      ASSERT_TRUE(prepare_weights({c.weight_view(), c.wscale_view(), {}, format}, &a, {}).ok());
      const Status st = prepare_weights(
          {c.weight_view(), {}, make_view<const uint8_t>(rows.data(), c.n, c.kb_count), format}, &b,
          {});
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(a.data_bytes(), b.data_bytes());
      ASSERT_EQ(a.scale_count(), b.scale_count());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.data_bytes()));
      EXPECT_EQ(0, std::memcmp(a.scales(), b.scales(), a.scale_count() * 2));
    }
  }
}

}  // namespace
}  // namespace quantkv
