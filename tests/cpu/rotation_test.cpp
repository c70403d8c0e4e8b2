// The shared rotation kernels (src/cpu/rotation_kernels.hpp): the fp64 Walsh-Hadamard reference
// against the explicit Sylvester matrix, every ISA variant bitwise equal to the scalar rows on
// lengths below / at / above every vector width, and the scalar rows against fp64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/rotation_kernels.hpp"
#include "reference/rope_reference.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

using testing::TestRng;

std::vector<float> random_row(TestRng& rng, int64_t n, float scale = 4.0f) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = rng.normal(0.0f, scale);
  return x;
}

// (cos, sin) of random angles, as a freqs_cis row.
std::vector<float> random_cos_sin(TestRng& rng, int64_t rope_dim) {
  std::vector<float> cs(static_cast<size_t>(rope_dim));
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const double angle = rng.uniform_float(-100.0f, 100.0f);
    cs[2 * i] = float(std::cos(angle));
    cs[2 * i + 1] = float(std::sin(angle));
  }
  return cs;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(HadamardReference, DefinitionEqualsSylvesterMatrix) {
  TestRng rng;
  for (int64_t n = 1; n <= 64; n *= 2) {
    const std::vector<int> h = reference::sylvester_matrix(n);
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = rng.normal();
    const std::vector<double> y = reference::hadamard_fp64(x);
    for (int64_t i = 0; i < n; ++i) {
      double expected = 0;
      for (int64_t j = 0; j < n; ++j) expected += h[size_t(i * n + j)] * x[size_t(j)];
      expected /= std::sqrt(double(n));
      EXPECT_NEAR(y[size_t(i)], expected, 1e-12 * n) << "n = " << n << ", i = " << i;
    }
    // H_n H_n = n I: the normalised transform is its own inverse.
    const std::vector<double> back = reference::hadamard_fp64(y);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(back[size_t(i)], x[size_t(i)], 1e-12 * n);
  }
}

TEST(RotationKernels, RopeEveryIsaEqualsScalarBitwise) {
  TestRng rng;
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    for (int64_t rope_dim = 2; rope_dim <= 80; rope_dim += 2) {
      const std::vector<float> x = random_row(rng, rope_dim), cs = random_cos_sin(rng, rope_dim);
      std::vector<float> expected = x;
      cpu::rope_row_scalar(expected.data(), cs.data(), rope_dim, layout);
      testing::for_each_isa([&](IsaLevel level) {
        std::vector<float> got = x;
        cpu::kernels().rotation.rope(got.data(), cs.data(), rope_dim, layout);
        EXPECT_TRUE(same_bits(got, expected))
            << rope_layout_name(layout) << " rope_dim = " << rope_dim;
      });
    }
  }
}

TEST(RotationKernels, RopeScalarMatchesFp64) {
  TestRng rng;
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    const int64_t rope_dim = 64;
    const std::vector<float> x = random_row(rng, rope_dim), cs = random_cos_sin(rng, rope_dim);
    std::vector<float> got = x;
    cpu::rope_row_scalar(got.data(), cs.data(), rope_dim, layout);
    std::vector<double> ref(x.begin(), x.end());
    reference::rope_fp64(ref.data(), cs.data(), rope_dim, layout);
    double norm = 0;
    for (float v : x) norm = std::max(norm, double(std::fabs(v)));
    // Two rounded products and a rounded sum: at most 1.5 ulp of the pair's magnitude.
    for (int64_t i = 0; i < rope_dim; ++i)
      EXPECT_NEAR(got[size_t(i)], ref[size_t(i)], 4.0 * norm * 0x1p-24);
  }
}

TEST(RotationKernels, HadamardEveryIsaEqualsScalarBitwiseAndFp64) {
  TestRng rng;
  for (int64_t n = 1; n <= 1024; n *= 2) {
    const std::vector<float> x = random_row(rng, n);
    const float scale = float(std::pow(double(n), -0.5));
    std::vector<float> expected = x;
    cpu::hadamard_row_scalar(expected.data(), n, scale);
    testing::for_each_isa([&](IsaLevel level) {
      std::vector<float> got = x;
      cpu::kernels().rotation.hadamard(got.data(), n, scale);
      EXPECT_TRUE(same_bits(got, expected)) << "n = " << n;
    });
    const std::vector<double> ref =
        reference::hadamard_fp64(std::vector<double>(x.begin(), x.end()));
    double l2 = 0;
    for (float v : x) l2 += double(v) * v;
    // log2(n) rounded additions and one multiply; each output's error is bounded by the l2 norm.
    const double tol = (std::log2(double(n)) + 2) * std::sqrt(l2) * 0x1p-23;
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(expected[size_t(i)], ref[size_t(i)], tol) << "n = " << n;
  }
}

TEST(RotationKernels, RoundBf16EveryIsaEqualsCodec) {
  TestRng rng;
  std::vector<float> x = random_row(rng, 61);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            1e-40f,
                            -3e-39f,
                            std::numeric_limits<float>::max(),
                            1.00390625f /* tie, rounds to even */,
                            1.01171875f /* tie, rounds up */,
                            3.3895314e38f /* rounds to inf */};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  std::vector<float> expected = x;
  for (float& v : expected) v = bf16_to_float(float_to_bf16(v));
  testing::for_each_isa([&](IsaLevel level) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(15), int64_t(16),
                      int64_t(17), int64_t(61)}) {
      std::vector<float> got = x;
      cpu::kernels().rotation.round_bf16(got.data(), n);
      std::vector<float> want = x;
      std::copy(expected.begin(), expected.begin() + n, want.begin());
      EXPECT_TRUE(same_bits(got, want)) << "n = " << n;  // and nothing past n written
    }
  });
}

}  // namespace
}  // namespace quantkv
