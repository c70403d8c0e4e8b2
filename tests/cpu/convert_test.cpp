// Bulk row conversions: every ISA path gives the scalar path's bits, for every code and for
// lengths around each vector width (tails included) and unaligned starts.
#include <gtest/gtest.h>

#include <vector>

#include "quantkv/formats.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::for_each_isa;

std::vector<uint8_t> random_bytes(testing::TestRng& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng.uniform_int(0, 255));
  return v;
}

TEST(Convert, E4M3ToBf16AndF32MatchScalarOnEveryIsa) {
  testing::TestRng rng;
  std::vector<uint8_t> all(256 + 84);  // every code, then enough for n = 333 at start 3
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint8_t(i);
  for_each_isa([&](IsaLevel) {
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 333}) {
      for (int64_t start : {0, 1, 3}) {
        const uint8_t* src = all.data() + start;
        std::vector<uint16_t> bf(n + 1, 0xDEAD);
        std::vector<float> f32(n + 1, -1234.5f);
        convert_e4m3_to_bf16(src, bf.data(), n);
        convert_e4m3_to_f32(src, f32.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(bf[i], e4m3_to_bf16_bits(src[i])) << "n " << n << " i " << i;
          const float want = e4m3_to_float(src[i]);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(f32[i]));
          } else {
            ASSERT_EQ(f32[i], want);
          }
        }
        EXPECT_EQ(bf[n], 0xDEAD) << "wrote past the end";
        EXPECT_EQ(f32[n], -1234.5f) << "wrote past the end";
      }
    }
    const auto bytes = random_bytes(rng, 4099);
    std::vector<float> f32(bytes.size());
    convert_e4m3_to_f32(bytes.data(), f32.data(), int64_t(bytes.size()));
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (!std::isnan(f32[i])) {
        ASSERT_EQ(f32[i], e4m3_to_float(bytes[i]));
      }
    }
  });
}

TEST(Convert, E2M1ToDoubledInt8MatchesScalarOnEveryIsa) {
  testing::TestRng rng;
  for_each_isa([&](IsaLevel) {
    for (int64_t n : {0, 2, 30, 32, 34, 62, 64, 66, 126, 128, 130, 4096, 4098}) {
      const auto packed = random_bytes(rng, size_t(n / 2 + 1));
      std::vector<int8_t> out(n + 1, 99);
      convert_e2m1_to_doubled_int8(packed.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], e2m1_to_doubled_int8(e2m1_get(packed.data(), i)))
            << "n " << n << " i " << i;
      }
      EXPECT_EQ(out[n], 99) << "wrote past the end";
    }
  });
}

}  // namespace
}  // namespace quantkv
