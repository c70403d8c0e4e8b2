// Internal: the vector elementwise fp32 math (fp32_math_kernels.hpp) over a lanes policy V,
// instantiated by fp32_math_avx2.cpp (8 lanes) and fp32_math_avx512.cpp (16): every step of
// detail::exp_f32 and quantkv::moe_activation per lane in the same order (the clamps and exp's
// cut-offs as compare-and-select with the scalar predicates, the negations as sign flips, NaN
// made canonical), the rest of a span by the scalar functions. V provides
//   Vec; kLanes; set1, load, store, add, sub, mul, div, neg;
//   pow2_minus1(n) (2^(n-1) from an integral n in [-124, 128]);
//   if_gt(a, b, x, y) / if_lt(a, b, x, y): a > b (a < b, ordered) ? x : y;
//   if_nan(a, x, y): a is NaN ? x : y.
// Include only from files compiled with their ISA flags and -ffp-contract=off (internal linkage).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/fp32_math_kernels.hpp"

namespace quantkv::cpu {
namespace {

// detail::exp_f32 per lane.
template <typename V>
typename V::Vec exp_lanes(typename V::Vec x) {
  using Vec = typename V::Vec;
  const Vec magic = V::set1(12582912.0f);
  const Vec t = V::mul(x, V::set1(1.44269502f));
  const Vec n = V::sub(V::add(t, magic), magic);
  const Vec r =
      V::sub(V::sub(x, V::mul(n, V::set1(0.693359375f))), V::mul(n, V::set1(-2.12194442e-4f)));
  Vec p = V::set1(1.98412701e-4f);
  for (const float c :
       {1.38888892e-3f, 8.33333377e-3f, 4.16666679e-2f, 1.66666672e-1f, 0.5f, 1.0f, 1.0f}) {
    p = V::add(V::mul(p, r), V::set1(c));
  }
  // n is an integer wherever x is in range (the other lanes are replaced below).
  Vec y = V::mul(V::mul(p, V::pow2_minus1(n)), V::set1(2.0f));
  y = V::if_gt(x, V::set1(88.75f), V::set1(HUGE_VALF), y);
  y = V::if_lt(x, V::set1(-86.0f), V::set1(0.0f), y);
  return V::if_nan(x, x, y);
}

template <typename V>
typename V::Vec canonical_nan_lanes(typename V::Vec h) {
  return V::if_nan(h, V::set1(std::numeric_limits<float>::quiet_NaN()), h);
}

template <typename V>
void moe_activation_span_lanes(MoeActivation act, const float* gate, const float* up, int64_t n,
                               float alpha, float limit, float* h) {
  using Vec = typename V::Vec;
  const Vec one = V::set1(1.0f);
  int64_t i = 0;
  if (act == MoeActivation::kSiluGated) {
    for (; i + V::kLanes <= n; i += V::kLanes) {
      const Vec g = V::load(gate + i);
      const Vec den = V::add(one, exp_lanes<V>(V::neg(g)));
      V::store(h + i, canonical_nan_lanes<V>(V::mul(V::div(g, den), V::load(up + i))));
    }
  } else {
    const Vec lim = V::set1(limit), nlim = V::neg(lim), a = V::set1(alpha);
    for (; i + V::kLanes <= n; i += V::kLanes) {
      const Vec gt = V::load(gate + i), ut = V::load(up + i);
      const Vec g = V::if_gt(gt, lim, lim, gt);
      const Vec u = V::if_lt(ut, nlim, nlim, V::if_gt(ut, lim, lim, ut));
      const Vec den = V::add(one, exp_lanes<V>(V::neg(V::mul(a, g))));
      const Vec s = V::div(one, den);
      V::store(h + i, canonical_nan_lanes<V>(V::mul(V::mul(g, s), V::add(u, one))));
    }
  }
  moe_activation_span_scalar(act, gate + i, up + i, n - i, alpha, limit, h + i);
}

template <typename V>
void exp_diff_lanes(const float* s, const float* m, int64_t n, float* p) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::store(p + i, exp_lanes<V>(V::sub(V::load(s + i), V::load(m + i))));
  }
  exp_diff_scalar(s + i, m + i, n - i, p + i);
}

}  // namespace
}  // namespace quantkv::cpu
