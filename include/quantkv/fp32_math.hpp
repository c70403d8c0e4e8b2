// The fp32 exp that the fused experts' activation and sparse MLA attention's softmax are defined
// with: one fixed sequence of IEEE fp32 steps, so that every ISA level (src/cpu/fp32_math_*.cpp)
// computes it lane by lane with the same bits, where the C library's exp cannot be vectorised
// without changing them. Shared by the library and the tests' references; not an API of its own.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace quantkv::detail {

// n = round(x log2 e) (ties to even), r = (x - n ln2_hi) - n ln2_lo, p = the degree-7 Taylor
// polynomial of e^r in Horner form, then (p 2^(n-1)) 2, each step rounded on its own (callers
// compile it without floating-point contraction); NaN stays NaN, x > 88.75 gives +inf and
// x < -86 gives 0. Within 2 ulp of e^x on [-86, 88.7] (tests/cpu/fp32_math_test.cpp).
inline float exp_f32(float x) {
  if (x != x) return x;
  if (x > 88.75f) return HUGE_VALF;
  if (x < -86.0f) return 0.0f;
  const float t = x * 1.44269502f;                  // log2 e
  const float n = (t + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23: rounds |t| < 2^22 to an integer
  const float r = (x - n * 0.693359375f) - n * -2.12194442e-4f;  // ln 2 = 0.693359375 - 2.12e-4
  float p = 1.98412701e-4f;                                      // 1/5040
  p = p * r + 1.38888892e-3f;                                    // 1/720
  p = p * r + 8.33333377e-3f;                                    // 1/120
  p = p * r + 4.16666679e-2f;                                    // 1/24
  p = p * r + 1.66666672e-1f;                                    // 1/6
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (int32_t(n) + 126) << 23;  // 2^(n-1): n in [-124, 128]
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  return (p * scale) * 2.0f;
}

}  // namespace quantkv::detail
