// The fused QKV projection (contract §4) in NVFP4 and MXFP4: every ISA path bit for bit against
// the scalar reference, the reference against fp64 (random mode: the documented bound; exact
// mode: equality), the cache writes through the page table with canaries, and bad input.
#include <gtest/gtest.h>

#include "qkv_test_harness.hpp"
#include "quantkv/quantize.hpp"

namespace quantkv {
namespace {

using qkv_test::check_case;
using qkv_test::QkvShape;
using testing::TestRng;

constexpr BlockFormat kFp4Formats[] = {BlockFormat::kNVFP4, BlockFormat::kMXFP4};

QkvShape base(BlockFormat f, int64_t k) {
  QkvShape s;
  s.format = f;
  s.k = k;
  return s;
}

TEST(QkvFp4, RowCountsAroundTheTiles) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    // Around the row tiles (4 AVX2, 6 AVX-512), the register-decoded (direct) kernels' limits
    // (2 tiles of 2 rows AVX2, 3 tiles = 18 rows AVX-512) and the panel kernels beyond.
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 17, 18, 19, 127, 128, 129, 300}) {
      SCOPED_TRACE(std::string(block_format_name(f)) + " M = " + std::to_string(m));
      QkvShape s = base(f, 64);
      s.seq_lens = {m};
      s.cache_lens = {int64_t(rng.uniform_int(0, 40))};
      s.sf.q = rng.uniform_float(0.5f, 2.0f);
      check_case(s, rng);
    }
  }
}

TEST(QkvFp4, HiddenSizesIncludingOddBlockCounts) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    const int64_t sfv = sf_vector_size(f);
    for (int64_t k : {sfv, sfv * 3, sfv * 13, int64_t(64), int64_t(256), int64_t(4096)}) {
      SCOPED_TRACE(std::string(block_format_name(f)) + " K = " + std::to_string(k));
      QkvShape s = base(f, k);
      s.seq_lens = {2, 1};
      s.cache_lens = {5, 17};
      s.q_heads = 1;
      check_case(s, rng);
    }
  }
}

TEST(QkvFp4, ExactModeEqualsRoundedExactValue) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    for (int64_t k : {int64_t(64), int64_t(4096)}) {
      for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3}) {
        if (k == 4096 && (dtype == DType::kF16 || dtype == DType::kF32)) continue;  // time
        SCOPED_TRACE(std::string(block_format_name(f)) + " K = " + std::to_string(k) + " " +
                     dtype_name(dtype));
        QkvShape s = base(f, k);
        s.exact = true;
        s.dtype = dtype;
        s.seq_lens = {3, 2};
        s.cache_lens = {14, 0};
        s.sf.q = 0.5f;
        check_case(s, rng);
      }
    }
  }
}

TEST(QkvFp4, GqaLlamaHeadsEveryCacheDtypeAndPageSize) {
  TestRng rng;
  struct Heads {
    int64_t q, kv;
  } heads[] = {{32, 8}, {8, 1}};
  const DType dtypes[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3};
  const int64_t pages[] = {1, 16, 128, 512};
  int i = 0;
  for (const Heads& h : heads) {
    for (DType dtype : dtypes) {
      const BlockFormat f = kFp4Formats[i % 2];
      QkvShape s = base(f, 64);
      s.q_heads = h.q;
      s.kv_heads = h.kv;
      s.head = 128;
      s.dtype = dtype;
      s.page = pages[i % 4];
      s.seq_lens = {int64_t(rng.uniform_int(1, 5)), int64_t(rng.uniform_int(1, 5))};
      s.cache_lens = {int64_t(rng.uniform_int(0, 1024)), int64_t(rng.uniform_int(0, 40))};
      SCOPED_TRACE(std::string(block_format_name(f)) + " heads " + std::to_string(h.q) + "/" +
                   std::to_string(h.kv) + " " + dtype_name(dtype) + " page " +
                   std::to_string(s.page));
      check_case(s, rng);
      ++i;
    }
  }
}

TEST(QkvFp4, RaggedBatchCrossingPagesWithEmptySequences) {
  TestRng rng;
  for (int rep = 0; rep < 3; ++rep) {
    QkvShape s = base(kFp4Formats[rep % 2], 32 * int64_t(rng.uniform_int(1, 4)));
    s.page = rep == 0 ? 1 : (rep == 1 ? 16 : 128);
    s.seq_lens = {int64_t(rng.uniform_int(1, 256)), 0, int64_t(rng.uniform_int(1, 256)), 1};
    s.cache_lens = {int64_t(rng.uniform_int(0, 1024)), int64_t(rng.uniform_int(0, 1024)),
                    int64_t(rng.uniform_int(0, 1024)), int64_t(rng.uniform_int(0, 1024))};
    s.dtype = DType(rep % 4);
    SCOPED_TRACE("rep " + std::to_string(rep));
    check_case(s, rng);
  }
}

TEST(QkvFp4, MlaCacheTakesEveryColumnAfterQ) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    for (int64_t kv_heads : {1, 3}) {
      QkvShape s = base(f, 128);
      s.kv_dim = 1;
      s.q_heads = 4;
      s.kv_heads = kv_heads;
      s.head = 32;
      s.seq_lens = {4, 7};
      s.cache_lens = {30, 1};
      s.dtype = kv_heads == 1 ? DType::kBF16 : DType::kE4M3;
      SCOPED_TRACE(std::string(block_format_name(f)) + " MLA kv_heads " + std::to_string(kv_heads));
      check_case(s, rng);
    }
  }
}

TEST(QkvFp4, SentinelPagesAreNotWritten) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    QkvShape s = base(f, 64);
    s.page = 4;
    s.seq_lens = {9, 5, 6};
    s.cache_lens = {3, 0, 2};
    s.backed = {7, 0, -1};  // sequence 0: positions 8.. unbacked; sequence 1: no page at all
    check_case(s, rng);
  }
}

TEST(QkvFp4, SectionScalesApplyPerColumnRange) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    QkvShape s = base(f, 96 / sf_vector_size(f) * sf_vector_size(f));
    s.single_sf = false;
    s.sf = {0.25f, 3.0f, rng.uniform_float(0.1f, 10.0f)};
    s.seq_lens = {5};
    s.cache_lens = {2};
    s.dtype = DType::kF32;
    check_case(s, rng);
  }
}

TEST(QkvFp4, NaNBlockScalePoisonsExactlyTheOutputsItTouches) {
  TestRng rng;
  for (BlockFormat f : kFp4Formats) {
    QkvShape s = base(f, 64);
    s.seq_lens = {4};
    s.dtype = DType::kF32;
    qkv_test::QkvCase c = qkv_test::make_case(s, rng);
    const uint8_t nan = has_e8m0_scales(f) ? 0xFF : 0x7F;
    c.wscale[swizzled_scale_offset(3, 1, c.kb_count)] = nan;  // column 3 (Q)
    c.iscale[swizzled_scale_offset(2, 0, c.kb_count)] = nan;  // row 2
    testing::for_each_isa([&](IsaLevel) {
      std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0);
      c.cache.raw_blocks() = c.canary_blocks;
      ASSERT_TRUE(qkv_test::run_op(c, &out, Context{}).ok());
      for (int64_t m = 0; m < c.m; ++m) {
        for (int64_t n = 0; n < c.q_dim; ++n) {
          const bool touched = m == 2 || n == 3;
          EXPECT_EQ(out[m * c.q_dim + n] == 0x7FFF, touched) << "m=" << m << " n=" << n;
        }
      }
      // Row 2's K and V (fp32 cache) are NaN too.
      const PagedKVCacheCollection kv = c.cache.view();
      const int64_t pos = 2;
      const uint32_t page = kv.page_of(0, pos);
      const float* blocks = reinterpret_cast<const float*>(c.cache.raw_blocks().data());
      EXPECT_TRUE(std::isnan(blocks[kv.element_offset(page, 0, s.layer, pos, 0, 5)]));
      EXPECT_TRUE(std::isnan(blocks[kv.element_offset(page, 1, s.layer, pos, 0, 7)]));
    });
  }
}

TEST(QkvFp4, StridedRowsGiveTheSameResult) {
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP8}) {
    SCOPED_TRACE(block_format_name(f));
    QkvShape s = base(f, 64);
    s.seq_lens = {7, 2};
    s.cache_lens = {3, 9};
    qkv_test::QkvCase c = qkv_test::make_case(s, rng);
    std::vector<uint16_t> want(std::size_t(c.m * c.q_dim), 0);
    ASSERT_TRUE(qkv_test::run_op(c, &want, Context{}).ok());
    const std::vector<uint8_t> want_cache = c.cache.raw_blocks();
    // Rows padded by a few bytes / elements: hidden_state, weight and output.
    const int64_t rb = row_bytes(f, s.k), hs = rb + 3, ws = rb + 5, os = c.q_dim + 7;
    std::vector<uint8_t> hidden(std::size_t(c.m * hs), 0xCD), weight(std::size_t(c.n * ws), 0xCD);
    for (int64_t r = 0; r < c.m; ++r) std::memcpy(&hidden[r * hs], &c.hidden[r * rb], rb);
    for (int64_t r = 0; r < c.n; ++r) std::memcpy(&weight[r * ws], &c.weight[r * rb], rb);
    testing::for_each_isa([&](IsaLevel) {
      std::vector<uint16_t> out(std::size_t(c.m * os), 0xEEEE);
      c.cache.raw_blocks() = c.canary_blocks;
      TensorView<const uint8_t, 2> hv{hidden.data(), {c.m, rb}, {hs, 1}};
      TensorView<const uint8_t, 2> wv{weight.data(), {c.n, rb}, {ws, 1}};
      TensorView<bfloat16, 2> ov{reinterpret_cast<bfloat16*>(out.data()), {c.m, c.q_dim}, {os, 1}};
      ASSERT_TRUE(generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                      hv, c.offsets_view(), wv, c.iscale_view(), c.wscale_view(), 1.0f,
                      c.cache.view(), s.layer, ov, f, Context{})
                      .ok());
      for (int64_t m = 0; m < c.m; ++m) {
        for (int64_t n = 0; n < os; ++n) {
          const uint16_t expected = n < c.q_dim ? want[m * c.q_dim + n] : uint16_t(0xEEEE);
          ASSERT_EQ(out[m * os + n], expected) << "m=" << m << " n=" << n;
        }
      }
      EXPECT_TRUE(c.cache.raw_blocks() == want_cache);
    });
  }
}

// ------------------------------------------------------------------ bad input
struct BadInputFixture {
  qkv_test::QkvCase c;
  std::vector<uint16_t> out;
  explicit BadInputFixture(BlockFormat f, TestRng& rng) {
    QkvShape s = base(f, 64);
    s.seq_lens = {3, 2};
    s.cache_lens = {1, 4};
    c = qkv_test::make_case(s, rng);
    out.assign(std::size_t(c.m * c.q_dim), 0x5A5A);
  }
  // Calls the op with one argument replaced; expects an error naming `name` and no write.
  template <typename Mutate>
  void expect_error(const char* name, Mutate mutate) {
    SCOPED_TRACE(name);
    auto hidden = c.hidden_view();
    auto offsets = c.offsets_view();
    auto weight = c.weight_view();
    auto iscale = c.iscale_view();
    auto wscale = c.wscale_view();
    float tensor_sf = 1.0f;
    PagedKVCacheCollection kv = c.cache.view();
    uint32_t layer = c.shape.layer;
    auto output = make_view(reinterpret_cast<bfloat16*>(out.data()), c.m, c.q_dim);
    BlockFormat format = c.shape.format;
    mutate(hidden, offsets, weight, iscale, wscale, tensor_sf, kv, layer, output, format);
    const std::vector<uint16_t> out_before = out;
    const Status s = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
        hidden, offsets, weight, iscale, wscale, tensor_sf, kv, layer, output, format, Context{});
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(name), std::string::npos) << s.to_string();
    EXPECT_TRUE(out == out_before) << "output written on error";
    EXPECT_TRUE(c.cache.raw_blocks() == c.canary_blocks) << "cache written on error";
  }
};

#define QKV_MUTATE                                                                             \
  [&](auto& hidden, auto& offsets, auto& weight, auto& iscale, auto& wscale, float& tensor_sf, \
      PagedKVCacheCollection& kv, uint32_t& layer, auto& output, BlockFormat& format)

TEST(QkvFp4, EveryBadArgumentIsNamedAndNothingIsWritten) {
  TestRng rng;
  BadInputFixture fx(BlockFormat::kNVFP4, rng);
  std::vector<uint32_t> bad_offsets = fx.c.offsets;
  std::vector<uint8_t> big_scales(fx.c.iscale.size() * 2, 0);
  std::vector<float> kv_scales(1 << 16, 1.0f);
  fx.expect_error(
      "format", QKV_MUTATE { format = BlockFormat(7); });
  fx.expect_error(
      "hidden_state", QKV_MUTATE { hidden.shape[1] -= 4; });
  fx.expect_error(
      "hidden_state", QKV_MUTATE { hidden.data = nullptr; });
  fx.expect_error(
      "weight", QKV_MUTATE { weight.shape[1] = 12; });  // K = 24: not a multiple of 16
  fx.expect_error(
      "weight", QKV_MUTATE { weight.shape[0] -= 1; });
  fx.expect_error(
      "weight", QKV_MUTATE { weight.strides[1] = 2; });
  fx.expect_error(
      "input_scale", QKV_MUTATE { iscale.shape[1] += 1; });
  fx.expect_error(
      "input_scale", QKV_MUTATE { iscale.strides[4] = 2; });
  fx.expect_error(
      "weight_scale", QKV_MUTATE { wscale.shape[0] += 1; });
  fx.expect_error(
      "output", QKV_MUTATE { output.shape[0] += 1; });
  fx.expect_error(
      "weight", QKV_MUTATE { output.shape[1] -= 1; });  // N no longer q + 2 kv
  fx.expect_error(
      "tensor_sf", QKV_MUTATE { tensor_sf = std::nanf(""); });
  fx.expect_error(
      "tensor_sf", QKV_MUTATE { tensor_sf = INFINITY; });
  fx.expect_error(
      "layer_idx", QKV_MUTATE { layer = uint32_t(kv.num_layers); });
  fx.expect_error(
      "kv_collection.scales", QKV_MUTATE {
        kv.scales = kv_scales.data();
        kv.scale_granularity = 128;
      });
  fx.expect_error(
      "kv_collection.kv_dim", QKV_MUTATE { kv.kv_dim = 3; });
  fx.expect_error(
      "kv_collection.blocks", QKV_MUTATE { kv.blocks = nullptr; });
  fx.expect_error(
      "input_row_offsets", QKV_MUTATE { offsets.shape[0] -= 1; });
  bad_offsets[1] = 4;
  bad_offsets[2] = 3;  // decreasing
  fx.expect_error(
      "input_row_offsets", QKV_MUTATE { offsets.data = bad_offsets.data(); });
  std::vector<uint32_t> long_cache = {1, 4000};
  fx.expect_error(
      "kv_collection.cache_lengths",
      QKV_MUTATE { kv.cache_lengths = make_view<const uint32_t>(long_cache.data(), int64_t(2)); });
}

TEST(QkvFp4, PreparedWeightMismatchIsRejected) {
  TestRng rng;
  BadInputFixture fx(BlockFormat::kMXFP4, rng);
  PreparedQkvWeights empty;
  auto output = make_view(reinterpret_cast<bfloat16*>(fx.out.data()), fx.c.m, fx.c.q_dim);
  Status s = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
      fx.c.hidden_view(), fx.c.offsets_view(), empty, fx.c.iscale_view(), SectionScales{},
      fx.c.cache.view(), 0, output, Context{});
  EXPECT_NE(s.message().find("weight"), std::string::npos) << s.to_string();
  PreparedQkvWeights pw;
  ASSERT_TRUE(prepare_qkv_weights(fx.c.weight_view(), fx.c.wscale_view(), BlockFormat::kMXFP4, &pw,
                                  Context{})
                  .ok());
  // A hidden state of another K.
  auto hidden = fx.c.hidden_view();
  hidden.shape[1] = 16;
  s = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
      hidden, fx.c.offsets_view(), pw, fx.c.iscale_view(), SectionScales{}, fx.c.cache.view(), 0,
      output, Context{});
  EXPECT_NE(s.message().find("hidden_state"), std::string::npos) << s.to_string();
  s = prepare_qkv_weights(fx.c.weight_view(), fx.c.wscale_view(), BlockFormat::kMXFP4, nullptr,
                          Context{});
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(fx.out == std::vector<uint16_t>(fx.out.size(), 0x5A5A));
}

}  // namespace
}  // namespace quantkv

namespace quantkv {
namespace {

// End to end: bf16 activations and weights quantised by quantize_dynamic_block_scaled, the
// GEMM factor tensor_sf = 1 / (g_a * g_w) (the inverse of the quantiser's global multipliers),
// then the fused op. Q must match the fp64 product of the dequantised operands to the fp32/bf16
// bound, and the fp64 product of the original values to the formats' quantisation error.
TEST(QkvFp4, QuantiserAndFusedOpEndToEnd) {
  TestRng rng;
  for (BlockFormat f : {BlockFormat::kNVFP4, BlockFormat::kMXFP4, BlockFormat::kMXFP8}) {
    SCOPED_TRACE(block_format_name(f));
    const int64_t m = 5, k = 256, q_dim = 32, kv_heads = 1, head = 16;
    const int64_t n = q_dim + 2 * kv_heads * head;
    std::vector<bfloat16> x(std::size_t(m * k)), w(std::size_t(n * k));
    float amax_x = 0, amax_w = 0;
    for (auto& v : x) {
      v.bits = float_to_bf16(rng.normal());
      amax_x = std::max(amax_x, std::fabs(bf16_to_float(v.bits)));
    }
    for (auto& v : w) {
      v.bits = float_to_bf16(rng.normal() * 0.05f);
      amax_w = std::max(amax_w, std::fabs(bf16_to_float(v.bits)));
    }
    const bool nv = f == BlockFormat::kNVFP4;
    const float g_a = nv ? 448.0f * 6.0f / amax_x : 1.0f, g_w = nv ? 448.0f * 6.0f / amax_w : 1.0f;
    const int64_t kb = k / sf_vector_size(f), rb = row_bytes(f, k);
    std::vector<uint8_t> xq(std::size_t(m * rb)), wq(std::size_t(n * rb));
    std::vector<uint8_t> xs(std::size_t(swizzled_scale_elements(m, kb))),
        ws(std::size_t(swizzled_scale_elements(n, kb)));
    ASSERT_TRUE(quantize_dynamic_block_scaled(
                    make_view<const bfloat16>(x.data(), m, k), g_a, f, make_view(xq.data(), m, rb),
                    make_view<uint8_t, 5>(xs.data(), swizzled_scale_shape(m, kb)), Context{})
                    .ok());
    ASSERT_TRUE(quantize_dynamic_block_scaled(
                    make_view<const bfloat16>(w.data(), n, k), g_w, f, make_view(wq.data(), n, rb),
                    make_view<uint8_t, 5>(ws.data(), swizzled_scale_shape(n, kb)), Context{})
                    .ok());
    PagedKVCacheConfig cfg;
    cfg.num_blocks = 1;
    cfg.page_size = 16;
    cfg.num_heads = kv_heads;
    cfg.head_size = head;
    PagedKVCache cache;
    ASSERT_TRUE(PagedKVCache::create(cfg, 1, &cache).ok());
    ASSERT_TRUE(cache.reserve(0, m).ok());
    std::vector<uint32_t> offs = {0, uint32_t(m)};
    std::vector<uint16_t> out(std::size_t(m * q_dim));
    const float tensor_sf = 1.0f / (g_a * g_w);
    ASSERT_TRUE(generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
                    make_view<const uint8_t>(xq.data(), m, rb),
                    make_view<const uint32_t>(offs.data(), int64_t(2)),
                    make_view<const uint8_t>(wq.data(), n, rb),
                    make_view<const uint8_t, 5>(xs.data(), swizzled_scale_shape(m, kb)),
                    make_view<const uint8_t, 5>(ws.data(), swizzled_scale_shape(n, kb)), tensor_sf,
                    cache.view(), 0, make_view(reinterpret_cast<bfloat16*>(out.data()), m, q_dim),
                    f, Context{})
                    .ok());
    auto dequant = [&](const std::vector<uint8_t>& d, const std::vector<uint8_t>& s, int64_t r,
                       int64_t i, float g) {
      const uint8_t sc = s[swizzled_scale_offset(r, i / sf_vector_size(f), kb)];
      const double scale = has_e8m0_scales(f) ? e8m0_to_float(sc) : double(e4m3_to_float(sc)) / g;
      const double v = f == BlockFormat::kMXFP8 ? e4m3_to_float(d[r * rb + i])
                                                : e2m1_to_float(e2m1_get(&d[r * rb], i));
      return v * scale;
    };
    double err2 = 0, ref2 = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < q_dim; ++c) {
        double deq = 0, exact = 0, abs_sum = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = dequant(xq, xs, r, i, g_a) * dequant(wq, ws, c, i, g_w);
          deq += p;
          abs_sum += std::fabs(p);
          exact += double(bf16_to_float(x[r * k + i].bits)) * bf16_to_float(w[c * k + i].bits);
        }
        const double got = bf16_to_float(out[r * q_dim + c]);
        EXPECT_LE(std::fabs(got - deq),
                  std::fabs(deq) * 0x1p-8 + (kb + 33) * 0x1p-24 * abs_sum * 1.01)
            << "r=" << r << " c=" << c;
        err2 += (got - exact) * (got - exact);
        ref2 += exact * exact;
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    std::printf("[ info     ] %s end-to-end relative error vs unquantised fp64: %.4f\n",
                block_format_name(f), rel);
    // Typical: NVFP4 ~0.15, MXFP4 ~0.18, MXFP8 ~0.04 (relative Frobenius error over Q).
    EXPECT_LT(rel, f == BlockFormat::kMXFP8 ? 0.06 : (f == BlockFormat::kNVFP4 ? 0.25 : 0.32));
  }
}

}  // namespace
}  // namespace quantkv
