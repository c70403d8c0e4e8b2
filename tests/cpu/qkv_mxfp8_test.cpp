// The fused QKV projection in MXFP8 (e4m3 data, e8m0 scales over 32 values; contract §4): the
// NVFP4 case matrix plus the shapes of MAX's own MXFP8 fuzz test, and the tensor_sf == 1 rule.
#include <gtest/gtest.h>

#include "cpu/qkv_kernels.hpp"
#include "qkv_test_harness.hpp"

namespace quantkv {
namespace {

using qkv_test::check_case;
using qkv_test::QkvShape;
using testing::TestRng;

QkvShape mxfp8(int64_t k) {
  QkvShape s;
  s.format = BlockFormat::kMXFP8;
  s.k = k;
  return s;
}

TEST(QkvMxfp8, RowCountsAndHiddenSizes) {
  TestRng rng;
  for (int64_t m : {1, 2, 6, 7, 127, 129}) {
    QkvShape s = mxfp8(64);
    s.seq_lens = {m};
    s.cache_lens = {int64_t(rng.uniform_int(0, 40))};
    SCOPED_TRACE("M = " + std::to_string(m));
    check_case(s, rng);
  }
  for (int64_t k : {32, 96, 416, 4096}) {
    QkvShape s = mxfp8(k);
    s.seq_lens = {2, 1};
    s.cache_lens = {5, 17};
    s.q_heads = 1;
    SCOPED_TRACE("K = " + std::to_string(k));
    check_case(s, rng);
  }
}

TEST(QkvMxfp8, ExactModeEveryCacheDtype) {
  TestRng rng;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kE4M3}) {
    QkvShape s = mxfp8(dtype == DType::kBF16 ? 2048 : 128);
    s.exact = true;
    s.dtype = dtype;
    s.seq_lens = {3, 2};
    s.cache_lens = {14, 0};
    SCOPED_TRACE(dtype_name(dtype));
    check_case(s, rng);
  }
}

TEST(QkvMxfp8, MlaSentinelsAndPageSizes) {
  TestRng rng;
  QkvShape mla = mxfp8(128);
  mla.kv_dim = 1;
  mla.q_heads = 2;
  mla.kv_heads = 2;
  mla.head = 32;
  mla.seq_lens = {4, 7};
  mla.cache_lens = {30, 1};
  mla.dtype = DType::kE4M3;
  check_case(mla, rng);
  for (int64_t page : {1, 16, 128, 512}) {
    QkvShape s = mxfp8(64);
    s.page = page;
    s.seq_lens = {9, 5, 6};
    s.cache_lens = {int64_t(rng.uniform_int(0, 1024)), 0, 2};
    s.backed = {s.cache_lens[0] + 4, 0, -1};
    s.dtype = DType(page % 4);
    SCOPED_TRACE("page " + std::to_string(page));
    check_case(s, rng);
  }
}

// MAX's fuzz test: head_dim 128, page size 512, bf16 cache; 8 q / 1 kv heads over hidden 256
// and 64 q / 4 kv heads over hidden 2048; ragged seq_lens 1..256 and cache_lens 0..1024.
TEST(QkvMxfp8, MaxFuzzShapes) {
  TestRng rng;
  struct Fuzz {
    int64_t q, kv, hidden, max_rows;
  } shapes[] = {{8, 1, 256, 256}, {64, 4, 2048, 2}};
  for (const Fuzz& f : shapes) {
    QkvShape s = mxfp8(f.hidden);
    s.q_heads = f.q;
    s.kv_heads = f.kv;
    s.head = 128;
    s.page = 512;
    s.dtype = DType::kBF16;
    // Sized for the scalar oracle: the wide shape gets few rows, the narrow one up to 256.
    const int64_t batch = 2;
    s.seq_lens.clear();
    s.cache_lens.clear();
    int64_t rows = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = std::min<int64_t>(rng.uniform_int(1, 256), f.max_rows / batch);
      s.seq_lens.push_back(std::max<int64_t>(len, 1));
      s.cache_lens.push_back(rng.uniform_int(0, 1024));
      rows += s.seq_lens.back();
    }
    if (f.max_rows > 2) s.seq_lens[0] = std::min<int64_t>(s.seq_lens[0], 40);  // ASan budget
    SCOPED_TRACE(std::to_string(f.q) + "q/" + std::to_string(f.kv) + "kv hidden " +
                 std::to_string(f.hidden));
    check_case(s, rng);
  }
}

TEST(QkvMxfp8, TensorSfMustBeOne) {
  TestRng rng;
  QkvShape s = mxfp8(64);
  qkv_test::QkvCase c = qkv_test::make_case(s, rng);
  std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0x1234);
  c.shape.sf.q = 0.5f;
  Status st = qkv_test::run_op(c, &out, Context{});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor_sf"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("MXFP8"), std::string::npos) << st.to_string();
  c.shape.single_sf = false;
  c.shape.sf = {1.0f, 1.0f, 2.0f};
  st = qkv_test::run_op(c, &out, Context{});
  EXPECT_NE(st.message().find("section_sf.v"), std::string::npos) << st.to_string();
  EXPECT_TRUE(out == std::vector<uint16_t>(out.size(), 0x1234));
  EXPECT_TRUE(c.cache.raw_blocks() == c.canary_blocks);
}

TEST(QkvMxfp8, NaNScaleAndSaturatingE4M3Cache) {
  TestRng rng;
  QkvShape s = mxfp8(64);
  s.seq_lens = {2};
  s.dtype = DType::kE4M3;
  qkv_test::QkvCase c = qkv_test::make_case(s, rng);
  // Large values: every weight 448 with scale 2^4, row 0 of the input 448 too: |c| >> 448.
  for (int64_t i = 0; i < 64; ++i) c.hidden[i] = 0x7E;
  for (auto& b : c.weight) b = 0x7E;
  for (auto& b : c.wscale) b = 131;  // 2^4 (padding entries too: never read)
  for (int64_t kb = 0; kb < c.kb_count; ++kb)
    c.iscale[swizzled_scale_offset(0, kb, c.kb_count)] = 131;
  c.iscale[swizzled_scale_offset(1, 1, c.kb_count)] = 0xFF;  // row 1: NaN
  testing::for_each_isa([&](IsaLevel) {
    std::vector<uint16_t> out(std::size_t(c.m * c.q_dim), 0);
    c.cache.raw_blocks() = c.canary_blocks;
    ASSERT_TRUE(qkv_test::run_op(c, &out, Context{}).ok());
    const PagedKVCacheCollection kv = c.cache.view();
    const uint8_t* blocks = c.cache.raw_blocks().data();
    for (int64_t d = 0; d < s.head; ++d) {
      const uint8_t k0 = blocks[kv.element_offset(kv.page_of(0, 0), 0, s.layer, 0, 0, d)];
      const uint8_t k1 = blocks[kv.element_offset(kv.page_of(0, 1), 0, s.layer, 1, 0, d)];
      EXPECT_EQ(k0 & 0x7F, 0x7E) << "saturates to ±448";
      EXPECT_EQ(k1, 0x7F) << "NaN";
    }
    for (int64_t n = 0; n < c.q_dim; ++n) EXPECT_EQ(out[c.q_dim + n], 0x7FFF);
  });
}

#if defined(QUANTKV_X86_KERNELS)
TEST(QkvMxfp8, Vdpbf16psFollowsTheCanonicalOrderHere) {
  if (!isa_level_supported(IsaLevel::kAvx512) || !cpu_features().avx512bf16)
    GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  // Not a requirement (the dispatcher falls back), but on the development CPU the fast path
  // must be the one in use, and the probe must agree with the bitwise tests above.
  EXPECT_TRUE(cpu::mxfp8_avx512bf16_matches_canonical_order());
}
#endif

}  // namespace
}  // namespace quantkv
