// The CUDA kernels' scalar helpers (src/cuda/common/kernel_math.hpp, src/core/recipes.hpp)
// are __host__ __device__: these tests run them on the CPU, so CI checks them without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/recipes.hpp"
#include "cuda/common/kernel_math.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/scale_layout.hpp"
#include "test_util.hpp"

namespace quantkv::cuda::detail {
namespace {

TEST(CudaHelpers, OrderedScoreKeyFollowsTheScoreOrderWithNaNLowest) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Strictly increasing scores -> strictly increasing keys.
  const std::vector<float> up = {-inf,   -3e38f, -1.5f,      -1e-40f, 0.0f, 1e-45f,
                                 1e-40f, 1.0f,   1.0000001f, 3e38f,   inf};
  EXPECT_GT(ordered_score_key(up[0]), ordered_score_key(nan)) << "NaN ranks below -inf";
  EXPECT_EQ(ordered_score_key(-nan), ordered_score_key(nan));
  for (std::size_t i = 1; i < up.size(); ++i) {
    EXPECT_LT(ordered_score_key(up[i - 1]), ordered_score_key(up[i]))
        << up[i - 1] << " < " << up[i];
  }
  EXPECT_EQ(ordered_score_key(-0.0f), ordered_score_key(0.0f)) << "-0 == +0: a tie";
}

TEST(CudaHelpers, OrderedScoreKeyAgreesWithFloatComparisonOnRandomValues) {
  testing::TestRng rng;
  for (int i = 0; i < 20000; ++i) {
    const float a = quantkv::detail::bits_float(uint32_t(rng.uniform_int(0, 0xFFFFFFFFll)));
    const float b = i % 2 ? rng.normal()
                          : quantkv::detail::bits_float(uint32_t(rng.uniform_int(0, 0xFFFFFFFFll)));
    if (std::isnan(a) || std::isnan(b)) continue;
    EXPECT_EQ(a < b, ordered_score_key(a) < ordered_score_key(b)) << a << " vs " << b;
    EXPECT_EQ(a == b, ordered_score_key(a) == ordered_score_key(b)) << a << " vs " << b;
  }
}

TEST(CudaHelpers, CompositeSortsByScoreThenSmallerIndex) {
  const uint32_t k1 = ordered_score_key(1.0f), k2 = ordered_score_key(2.0f);
  EXPECT_GT(topk_composite(k2, 7), topk_composite(k1, 0));
  EXPECT_GT(topk_composite(k1, 3), topk_composite(k1, 4)) << "ties: smaller index first";
  EXPECT_GT(topk_composite(ordered_score_key(NAN), 123456), 0u) << "0 pads below real pairs";
  for (uint32_t j : {0u, 1u, 77u, 0x7FFFFFFEu}) {
    EXPECT_EQ(topk_composite_index(topk_composite(k1, j)), int32_t(j));
  }
}

TEST(CudaHelpers, E2m1FromBitsMatchesTheCodecForAllCodes) {
  for (uint32_t code = 0; code < 16; ++code) {
    const float a = e2m1_to_float_bits(code), b = e2m1_to_float(uint8_t(code));
    EXPECT_EQ(quantkv::detail::float_bits(a), quantkv::detail::float_bits(b)) << "code " << code;
  }
}

TEST(CudaHelpers, E2m1WordDecodeGivesEveryValueTimes2PowMinus126) {
  testing::TestRng rng;
  std::vector<uint32_t> words;
  for (uint32_t code = 0; code < 16; ++code) {
    for (int pos = 0; pos < 8; ++pos) words.push_back(code << (4 * pos));  // each code in each slot
  }
  for (int i = 0; i < 4096; ++i) words.push_back(uint32_t(rng.uniform_int(0, 0xFFFFFFFFll)));
  for (uint32_t w : words) {
    uint32_t out[4];
    e2m1x8_to_bf16x2_prescaled(w, out);
    for (int word = 0; word < 4; ++word) {
      for (int half = 0; half < 2; ++half) {
        const int slot = e2m1x8_slot(word, half);
        const float v = bf16_to_float(uint16_t(out[word] >> (16 * half))) * 0x1p126f;
        const float want = e2m1_to_float(uint8_t((w >> (4 * slot)) & 0xFu));
        ASSERT_EQ(quantkv::detail::float_bits(v), quantkv::detail::float_bits(want))
            << std::hex << "word 0x" << w << " slot " << slot;
      }
    }
  }
  EXPECT_EQ(bf16_to_float(uint16_t(kBf16x2Two126)), 0x1p126f);
  EXPECT_EQ(kBf16x2Two126 >> 16, kBf16x2Two126 & 0xFFFFu);
}

TEST(CudaHelpers, BlockScaleBf16x2IsTheExactScaleInBothHalves) {
  for (int b = 0; b < 256; ++b) {
    for (bool e8m0 : {false, true}) {
      const uint32_t w = block_scale_bf16x2(uint8_t(b), e8m0);
      const float want = block_scale_value(uint8_t(b), e8m0);
      EXPECT_EQ(w >> 16, w & 0xFFFFu);
      const float got = bf16_to_float(uint16_t(w));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << b;
      } else {
        EXPECT_EQ(got, want) << b << (e8m0 ? " e8m0" : " e4m3");
      }
    }
  }
}

TEST(CudaHelpers, BlockScaleValueIgnoresTheE4m3SignAndKeepsNaN) {
  EXPECT_EQ(block_scale_value(0x38, false), 1.0f);
  EXPECT_EQ(block_scale_value(0xB8, false), 1.0f) << "UE4M3: sign bit ignored";
  EXPECT_TRUE(std::isnan(block_scale_value(0xFF, false)));
  EXPECT_TRUE(std::isnan(block_scale_value(0x7F, false)));
  EXPECT_EQ(block_scale_value(127, true), 1.0f);
  EXPECT_EQ(block_scale_value(130, true), 8.0f);
  EXPECT_TRUE(std::isnan(block_scale_value(0xFF, true)));
}

TEST(CudaHelpers, DequantisedProductsAreExactInBf16) {
  // e2m1 x e4m3 (every finite pair) and e4m3 x e8m0 (exponents in the normal range) survive
  // the round trip through bf16 unchanged: the kernels' bf16 MMA operands are exact.
  for (uint32_t code = 0; code < 16; ++code) {
    for (int s = 0; s < 256; ++s) {
      if ((s & 0x7F) == 0x7F) continue;
      const float v = e2m1_to_float_bits(code) * block_scale_value(uint8_t(s), false);
      EXPECT_EQ(bf16_to_float(float_to_bf16(v)), v) << code << " " << s;
    }
  }
  for (int x = 0; x < 256; ++x) {
    if ((x & 0x7F) == 0x7F) continue;
    for (int e = 20; e < 235; ++e) {
      const float v = e4m3_to_float(uint8_t(x)) * block_scale_value(uint8_t(e), true);
      ASSERT_EQ(bf16_to_float(float_to_bf16(v)), v) << x << " " << e;
    }
  }
}

TEST(CudaHelpers, SwizzledOffsetSplitsIntoRowAndColumnParts) {
  for (int64_t kb_count : {1, 3, 4, 5, 17, 512}) {
    for (int64_t r : {0, 1, 31, 32, 127, 128, 129, 1000, 70000}) {
      for (int64_t kb = 0; kb < kb_count; kb += (kb_count > 20 ? 7 : 1)) {
        ASSERT_EQ(swizzled_row_base(r, kb_count) + swizzled_col_offset(kb),
                  swizzled_scale_offset(r, kb, kb_count))
            << r << " " << kb << " " << kb_count;
      }
    }
  }
}

TEST(CudaHelpers, SwizzledColumnOffsetDoesNotWrapPastInt32) {
  // The column part is kb * 128 + (kb & 3): past 2^31 from kb = 2^24 (NVFP4 K = 2^28). The
  // largest int32 K the CUDA entry points accept has kb up to 2^27 - 1.
  const int64_t kb_count = (int64_t(1) << 27) - 1;
  for (int64_t kb :
       {(int64_t(1) << 24) - 1, int64_t(1) << 24, (int64_t(1) << 24) + 3, kb_count - 1}) {
    EXPECT_EQ(swizzled_col_offset(kb), (kb / 4) * 512 + kb % 4) << kb;
    EXPECT_GT(swizzled_col_offset(kb), int64_t(INT32_MAX) / 2) << kb;
    for (int64_t r : {0, 1, 127, 129, 300}) {
      ASSERT_EQ(swizzled_row_base(r, kb_count) + swizzled_col_offset(kb),
                swizzled_scale_offset(r, kb, kb_count))
          << r << " " << kb;
    }
  }
  EXPECT_GT(swizzled_col_offset(kb_count - 1), int64_t(INT32_MAX))
      << "the last column lies past 2^31";
}

TEST(CudaHelpers, SequenceOfRowSkipsEmptySequences) {
  const std::vector<uint32_t> offs = {0, 3, 3, 3, 5, 9, 9};
  const int32_t batch = int32_t(offs.size()) - 1;
  const int32_t expected[9] = {0, 0, 0, 3, 3, 4, 4, 4, 4};
  for (uint32_t m = 0; m < 9; ++m)
    EXPECT_EQ(sequence_of_row(offs.data(), batch, m), expected[m]) << m;
  const std::vector<uint32_t> one = {0, 4};
  EXPECT_EQ(sequence_of_row(one.data(), 1, 3), 0);
}

TEST(CudaHelpers, IndexerKeyBoundFollowsSpecSection3) {
  const std::vector<uint32_t> offs = {0, 3, 3, 5};
  const std::vector<uint32_t> lengths = {10, 99, 0, 99, 4, 99};  // stride 2: 10, 0, 4
  // causal: cache_len + i + 1; otherwise cache_len + seq_len.
  const int32_t causal[5] = {11, 12, 13, 5, 6};
  const int32_t full[5] = {13, 13, 13, 6, 6};
  for (uint32_t t = 0; t < 5; ++t) {
    EXPECT_EQ(indexer_key_bound(offs.data(), lengths.data(), 2, 3, t, true), causal[t]) << t;
    EXPECT_EQ(indexer_key_bound(offs.data(), lengths.data(), 2, 3, t, false), full[t]) << t;
  }
}

TEST(CudaHelpers, IndexerReluPropagatesNaN) {
  EXPECT_EQ(indexer_relu(-2.0f), 0.0f);
  EXPECT_EQ(indexer_relu(3.0f), 3.0f);
  EXPECT_TRUE(std::isnan(indexer_relu(NAN)));
}

TEST(CudaHelpers, RecipesFollowSpecSection5) {
  // K store scale: amax / 448, rounded up to a power of two from the bits.
  EXPECT_EQ(recipe::fp8_token_scale(448.0f, false), 1.0f);
  EXPECT_EQ(recipe::fp8_token_scale(448.0f, true), 1.0f);
  EXPECT_EQ(recipe::fp8_token_scale(449.0f, true), 2.0f);
  EXPECT_EQ(recipe::fp8_token_scale(0.0f, false), 1e-4f / 448.0f) << "amax floor 1e-4";
  EXPECT_EQ(recipe::fp8_token_scale(300.0f, false), 300.0f / 448.0f);
  // MX scale: e8m0 rounded up.
  EXPECT_EQ(recipe::mx_block_scale(6.0f, kE2M1Max), 127);
  EXPECT_EQ(recipe::mx_block_scale(6.5f, kE2M1Max), 128);
  EXPECT_EQ(recipe::mx_block_scale(448.0f, kE4M3Max), 127);
  // NVFP4 with g = 448 * 6 / amax and amax = 6 -> g = 448; sf = e4m3(448 * 1) = 448.
  const recipe::Nvfp4BlockScale s = recipe::nvfp4_block_scale(6.0f, 448.0f);
  EXPECT_EQ(e4m3_to_float(s.sf_bits), 448.0f);
  EXPECT_EQ(s.out, 1.0f / (448.0f * (1.0f / 448.0f)));
  EXPECT_EQ(recipe::nvfp4_quantize_value(6.0f, s.out), 0x7);
  const recipe::Nvfp4BlockScale z = recipe::nvfp4_block_scale(0.0f, 448.0f);
  EXPECT_EQ(z.sf_bits, 0);
  EXPECT_EQ(z.out, 0.0f);
  // amax ignores NaN.
  EXPECT_EQ(recipe::amax_update(recipe::amax_update(0.0f, NAN), -3.0f), 3.0f);
}

}  // namespace
}  // namespace quantkv::cuda::detail
