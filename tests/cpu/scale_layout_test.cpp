// The 5-D swizzled scale layout: the offset formula entry by entry, and linear -> 5-D ->
// linear round trips on awkward sizes with zero padding.
#include "quantkv/scale_layout.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "test_util.hpp"

namespace quantkv {
namespace {

TEST(ScaleLayout, OffsetMatchesSpecFormulaAndIndexOrder) {
  for (int64_t rows : {1, 127, 128, 129, 300}) {
    for (int64_t kb_count : {1, 3, 4, 5, 17}) {
      const auto shape = swizzled_scale_shape(rows, kb_count);
      const auto strides = contiguous_strides<5>(shape);
      std::vector<bool> seen(size_t(swizzled_scale_elements(rows, kb_count)), false);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t kb = 0; kb < kb_count; ++kb) {
          const int64_t idx[5] = {r / 128, kb / 4, r % 32, (r % 128) / 32, kb % 4};
          int64_t want = 0;
          for (int d = 0; d < 5; ++d) want += idx[d] * strides[d];
          const int64_t got = swizzled_scale_offset(r, kb, kb_count);
          ASSERT_EQ(got, want) << "r " << r << " kb " << kb;
          ASSERT_FALSE(seen[size_t(got)]) << "two entries share offset " << got;
          seen[size_t(got)] = true;
        }
      }
    }
  }
}

TEST(ScaleLayout, RoundTripOnAwkwardSizesWritesZeroPadding) {
  testing::TestRng rng;
  for (int64_t rows : {1, 127, 129, 300}) {
    for (int64_t kb_count : {1, 3, 5, 17}) {
      std::vector<uint8_t> linear(size_t(rows * kb_count));
      for (auto& v : linear) v = uint8_t(rng.uniform_int(1, 255));  // non-zero: padding shows
      std::vector<uint8_t> swz(size_t(swizzled_scale_elements(rows, kb_count)), 0xEE);
      ASSERT_TRUE(
          linear_to_swizzled_scales(make_view<const uint8_t>(linear.data(), rows, kb_count),
                                    make_view(swz.data(), swizzled_scale_shape(rows, kb_count)))
              .ok());
      int64_t nonzero = 0;
      for (uint8_t v : swz) nonzero += v != 0;
      EXPECT_EQ(nonzero, rows * kb_count) << "padding must be zero";
      std::vector<uint8_t> back(linear.size(), 0);
      ASSERT_TRUE(swizzled_to_linear_scales(
                      make_view<const uint8_t>(swz.data(), swizzled_scale_shape(rows, kb_count)),
                      make_view(back.data(), rows, kb_count))
                      .ok());
      EXPECT_EQ(back, linear) << "R " << rows << " Kb " << kb_count;
    }
  }
}

TEST(ScaleLayout, WrongSwizzledShapeIsNamed) {
  std::vector<uint8_t> linear(10), swz(512);
  const Status s = linear_to_swizzled_scales(make_view<const uint8_t>(linear.data(), 2, 5),
                                             make_view(swz.data(), 1, 1, 32, 4, 4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("swizzled: expected shape [1, 2, 32, 4, 4]"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace quantkv
