#include "reference/rope_reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace quantkv::reference {

void rope_fp64(double* x, const float* cs, int64_t rope_dim, RopeLayout layout) {
  const int64_t half = rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    double& a = layout == RopeLayout::kInterleaved ? x[2 * i] : x[i];
    double& b = layout == RopeLayout::kInterleaved ? x[2 * i + 1] : x[i + half];
    const double c = cs[2 * i], s = cs[2 * i + 1];
    const double a0 = a, b0 = b;
    a = a0 * c - b0 * s;
    b = a0 * s + b0 * c;
  }
}

std::vector<double> hadamard_fp64(const std::vector<double>& x) {
  const std::size_t n = x.size();
  std::vector<double> y(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) y[i] += (std::popcount(i & j) % 2 == 0 ? x[j] : -x[j]);
    y[i] /= std::sqrt(double(n));
  }
  return y;
}

std::vector<int> sylvester_matrix(int64_t n) {
  std::vector<int> h{1};
  for (int64_t m = 1; m < n; m *= 2) {
    std::vector<int> next(std::size_t(4 * m * m));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < m; ++c) {
        const int v = h[std::size_t(r * m + c)];
        next[std::size_t(r * 2 * m + c)] = v;
        next[std::size_t(r * 2 * m + c + m)] = v;
        next[std::size_t((r + m) * 2 * m + c)] = v;
        next[std::size_t((r + m) * 2 * m + c + m)] = -v;
      }
    }
    h.swap(next);
  }
  return h;
}

double round_to_bf16(double x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int ulp_exp = std::max(e - 8, -133);
  return std::ldexp(std::nearbyint(std::ldexp(x, -ulp_exp)), ulp_exp);
}

std::vector<double> front_end_fp64(std::vector<double> x, const IndexerFrontEnd& fe,
                                   const float* cs) {
  const int64_t D = int64_t(x.size());
  const bool bf16 = fe.rounding == FrontEndRounding::kBf16Steps;
  if (fe.apply_rope) {
    const int64_t rope_dim = fe.rope.freqs_cis.shape[1];
    const int64_t off = fe.rope.placement == RopePlacement::kLeading ? 0 : D - rope_dim;
    rope_fp64(x.data() + off, cs, rope_dim, fe.rope.layout);
    if (bf16)
      for (double& v : x) v = round_to_bf16(v);
  }
  if (fe.hadamard == HadamardMode::kWalshHadamard) {
    x = hadamard_fp64(x);
    if (bf16)
      for (double& v : x) v = round_to_bf16(v);
  }
  return x;
}

}  // namespace quantkv::reference
