// Per-row top-k (src/cpu/topk.cpp) against a full stable sort, on every ISA path: lengths
// below, at and above the filter's switch-over, ties, NaN, ±0, ±inf, top_k above the length,
// and rows built to mislead the sampled threshold (so the fallback runs).
#include "cpu/topk.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "reference/indexer_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

void expect_matches_reference(const std::vector<float>& scores, int64_t top_k, const char* what) {
  SCOPED_TRACE(std::string(what) + " len=" + std::to_string(scores.size()) +
               " top_k=" + std::to_string(top_k));
  std::vector<int32_t> expected(static_cast<std::size_t>(top_k));
  reference::topk_reference(std::vector<double>(scores.begin(), scores.end()), top_k,
                            expected.data());
  testing::for_each_isa([&](IsaLevel) {
    cpu::TopkScratch scratch;
    std::vector<int32_t> out(static_cast<std::size_t>(top_k));
    testing::poison(out);
    cpu::topk_row(scores.data(), int64_t(scores.size()), top_k, out.data(), &scratch);
    ASSERT_EQ(out, expected);
  });
}

std::vector<float> normal_row(TestRng& rng, int64_t len) {
  std::vector<float> v(static_cast<std::size_t>(len));
  for (float& x : v) x = rng.normal();
  return v;
}

TEST(Topk, RandomRowsAroundEverySwitchOver) {
  TestRng rng;
  for (int64_t len : {1, 2, 15, 16, 17, 31, 33, 100, 1000, 8191, 8192, 20000, 131072}) {
    for (int64_t top_k :
         {int64_t(1), int64_t(16), int64_t(33), int64_t(2048), int64_t(3000), len, len + 1}) {
      if (len > 20000 && top_k != 2048 && top_k != 16) continue;  // keep the suite fast
      expect_matches_reference(normal_row(rng, len), top_k, "normal");
    }
  }
}

TEST(Topk, TiesKeepPositionOrder) {
  TestRng rng;
  for (int64_t len : {40, 5000, 50000}) {
    std::vector<float> v(static_cast<std::size_t>(len));
    for (float& x : v) x = float(rng.uniform_int(-3, 3));
    for (int64_t top_k : {1, 7, 64, 2048}) expect_matches_reference(v, top_k, "small integers");
    std::vector<float> same(static_cast<std::size_t>(len), 0.5f);
    expect_matches_reference(same, 100, "all equal");
  }
}

TEST(Topk, NanRanksLastAndSignedZerosTie) {
  TestRng rng;
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  for (int64_t len : {50, 10000, 40000}) {
    std::vector<float> v = normal_row(rng, len);
    for (float& x : v) {
      const int64_t r = rng.uniform_int(0, 9);
      if (r == 0) x = nan;
      if (r == 1) x = -nan;
      if (r == 2) x = rng.uniform_int(0, 1) ? 0.0f : -0.0f;
      if (r == 3) x = rng.uniform_int(0, 1) ? inf : -inf;
    }
    for (int64_t top_k : {int64_t(1), int64_t(10), int64_t(2048), len})
      expect_matches_reference(v, top_k, "non-finite mix");
    std::vector<float> nans(static_cast<std::size_t>(len), nan);
    nans[len / 2] = -inf;
    expect_matches_reference(nans, 5, "mostly NaN");
  }
}

TEST(Topk, MisleadingSampleFallsBackToTheWholeRow) {
  // The sample reads positions i * len / 1024: make exactly those large, so the sampled
  // threshold lets only ~1024 scores through while n is larger.
  const int64_t len = 65536;
  std::vector<float> v(static_cast<std::size_t>(len));
  for (int64_t j = 0; j < len; ++j) v[j] = float(j % 977) * 1e-3f;
  for (int64_t i = 0; i < 1024; ++i) v[i * len / 1024] = 1000.0f + float(i);
  for (int64_t top_k : {1500, 4000, 8000}) expect_matches_reference(v, top_k, "adversarial sample");
}

TEST(Topk, EmptyRowIsAllMinusOne) {
  cpu::TopkScratch scratch;
  std::vector<int32_t> out(4, 7);
  cpu::topk_row(nullptr, 0, 4, out.data(), &scratch);
  EXPECT_EQ(out, std::vector<int32_t>(4, -1));
}

TEST(Topk, OrderKeyIsMonotoneAndMapsNanLowest) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const float ordered[] = {-inf, -3e38f, -1.0f, -1e-40f, 0.0f, 1e-40f, 1.0f, 3e38f, inf};
  EXPECT_LT(cpu::score_order_key(nan), cpu::score_order_key(-inf));
  EXPECT_EQ(cpu::score_order_key(-nan), cpu::score_order_key(nan));
  EXPECT_EQ(cpu::score_order_key(-0.0f), cpu::score_order_key(0.0f));
  for (std::size_t i = 1; i < std::size(ordered); ++i) {
    EXPECT_LT(cpu::score_order_key(ordered[i - 1]), cpu::score_order_key(ordered[i])) << ordered[i];
  }
}

}  // namespace
}  // namespace quantkv
