// The fused experts' activation (quantkv/moe.hpp, src/cpu/moe_activation_kernels.hpp): the
// exp it uses (detail::exp_f32) against the fp64 exp, and every ISA level's span kernel bitwise
// equal to the scalar moe_activation on random values at several scales, on the values where its
// branches switch (the clamps, exp's cut-offs, NaN, infinities, signed zeros, subnormals) and on
// span lengths below / at / above the 8- and 16-lane vectors. Outputs are poisoned before each
// run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/kernels.hpp"
#include "quantkv/moe.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulp_distance(float a, float b) { return std::llabs(int64_t(bits(a)) - int64_t(bits(b))); }

TEST(Fp32Exp, WithinTwoUlpOfTheFp64Exp) {
  TestRng rng;
  int64_t worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const float want = float(std::exp(double(x)));
    const float got = detail::exp_f32(x);
    ASSERT_TRUE(std::isfinite(got)) << "x = " << x;
    const int64_t d = ulp_distance(got, want);
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
  };
  for (int i = 0; i <= 2000000; ++i) check(-86.0f + float(i) * (88.7f + 86.0f) / 2000000.0f);
  for (int i = 0; i < 200000; ++i) check(rng.uniform_float(-1.0f, 1.0f));
  for (int i = 0; i < 200000; ++i) check(rng.uniform_float(-86.0f, 88.7f));
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
  EXPECT_EQ(bits(detail::exp_f32(0.0f)), bits(1.0f));
  EXPECT_EQ(bits(detail::exp_f32(-0.0f)), bits(1.0f));
  EXPECT_TRUE(std::isnan(detail::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(detail::exp_f32(88.76f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::exp_f32(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(bits(detail::exp_f32(-86.01f)), bits(0.0f));
  EXPECT_EQ(bits(detail::exp_f32(-std::numeric_limits<float>::infinity())), bits(0.0f));
}

// Values where a branch of the activation or of exp_f32 switches, for a limit of 7 and
// alpha 1.702 (gpt-oss) and for the silu's exp(-gate).
std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          nan,
                          -nan,
                          inf,
                          -inf,
                          7.0f,
                          -7.0f,
                          6.9999995f,
                          7.0000005f,
                          -7.0000005f,
                          86.0f,
                          -86.0f,
                          86.00001f,
                          -86.00001f,
                          88.75f,
                          -88.75f,
                          88.750008f,
                          -88.750008f,
                          50.52f,
                          -50.52f,
                          52.14f,
                          -52.14f,
                          1e-40f,
                          -1e-40f,
                          1e30f,
                          -1e30f,
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          0.5f,
                          -0.5f,
                          1.0f,
                          -1.0f};
  return v;
}

void check_span(MoeActivation act, const std::vector<float>& gate, const std::vector<float>& up,
                float alpha, float limit) {
  const int64_t n = int64_t(gate.size());
  std::vector<float> want(gate.size());
  for (int64_t i = 0; i < n; ++i)
    want[size_t(i)] = moe_activation(act, gate[size_t(i)], up[size_t(i)], alpha, limit);
  testing::for_each_isa([&](IsaLevel level) {
    std::vector<float> got(gate.size() + 1, std::numeric_limits<float>::quiet_NaN());
    const float guard = -12345.0f;
    got[gate.size()] = guard;  // past the span: never written
    cpu::kernels().math.moe_activation(act, gate.data(), up.data(), n, alpha, limit, got.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)]))
          << isa_level_name(level) << " activation " << int(act) << " n = " << n << " i = " << i
          << " gate = " << gate[size_t(i)] << " up = " << up[size_t(i)] << " alpha = " << alpha
          << " limit = " << limit;
    }
    ASSERT_EQ(bits(got[gate.size()]), bits(guard)) << isa_level_name(level);
  });
}

TEST(MoeActivationSpan, EveryIsaEqualsTheScalarActivationBitwise) {
  TestRng rng;
  const std::vector<float> edges = edge_values();
  for (MoeActivation act : {MoeActivation::kSiluGated, MoeActivation::kSwigluOai}) {
    for (const float scale : {0.5f, 4.0f, 40.0f, 400.0f}) {
      for (int64_t n = 0; n <= 70; ++n) {
        std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          gate[size_t(i)] = rng.normal(0.0f, scale);
          up[size_t(i)] = rng.normal(0.0f, scale);
        }
        check_span(act, gate, up, 1.702f, 7.0f);
      }
    }
    // Long spans over the range where exp's argument stays finite and non-zero for both
    // activations (a change of one ulp in one of exp's coefficients shows here).
    for (int span = 0; span < 64; ++span) {
      std::vector<float> gate(4096), up(4096);
      for (size_t i = 0; i < gate.size(); ++i) {
        gate[i] = rng.uniform_float(-40.0f, 40.0f);
        up[i] = rng.uniform_float(-10.0f, 10.0f);
      }
      check_span(act, gate, up, 1.702f, 7.0f);
    }
    // Every pair of edge values, in spans of 40 (vector lanes and the scalar tail alike).
    std::vector<float> gate, up;
    for (float g : edges) {
      for (float u : edges) {
        gate.push_back(g);
        up.push_back(u);
        gate.push_back(-g);
        up.push_back(u);
      }
    }
    for (size_t i0 = 0; i0 < gate.size(); i0 += 40) {
      const size_t i1 = std::min(gate.size(), i0 + 40);
      const std::vector<float> g(gate.begin() + long(i0), gate.begin() + long(i1));
      const std::vector<float> u(up.begin() + long(i0), up.begin() + long(i1));
      check_span(act, g, u, 1.702f, 7.0f);
      // Unusual parameters take the same branches as the scalar function too.
      check_span(act, g, u, -3.0f, -1.0f);
      check_span(act, g, u, 1.0f, std::numeric_limits<float>::quiet_NaN());
      check_span(act, g, u, 1.0f, 0.0f);
    }
  }
}

TEST(ExpDiff, EveryIsaEqualsTheScalarRowBitwise) {
  TestRng rng;
  const std::vector<float> edges = edge_values();
  for (int64_t n = 0; n <= 70; ++n) {
    std::vector<float> s(static_cast<size_t>(n)), m(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      // Softmax-like (s <= m, spread over exp's range) and, every seventh, edge values.
      m[size_t(i)] = rng.normal(0.0f, 20.0f);
      s[size_t(i)] = m[size_t(i)] - std::fabs(rng.normal(0.0f, 30.0f));
      if (i % 7 == 3) s[size_t(i)] = edges[size_t(i) % edges.size()];
      if (i % 11 == 5) m[size_t(i)] = edges[size_t(i * 3) % edges.size()];
    }
    std::vector<float> want(s.size());
    cpu::exp_diff_scalar(s.data(), m.data(), n, want.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits(want[size_t(i)]), bits(detail::exp_f32(s[size_t(i)] - m[size_t(i)])));
    }
    testing::for_each_isa([&](IsaLevel level) {
      std::vector<float> got(s.size() + 1, std::numeric_limits<float>::quiet_NaN());
      got[s.size()] = -12345.0f;
      cpu::kernels().math.exp_diff(s.data(), m.data(), n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)]))
            << isa_level_name(level) << " n = " << n << " i = " << i << " s = " << s[size_t(i)]
            << " m = " << m[size_t(i)];
      }
      ASSERT_EQ(got[s.size()], -12345.0f);
    });
  }
}

}  // namespace
}  // namespace quantkv
