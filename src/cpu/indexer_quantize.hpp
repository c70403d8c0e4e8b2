// Internal: the per-token (K store) and per-(token, head) (Q prepare) fp8 quantisation of
// SPEC §5, shared by src/ops/indexer_k_store.cpp and src/ops/indexer_q_prepare.cpp.
#pragma once

#include <cstdint>

#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::cpu {

// s = fl(max(amax, 1e-4) / 448); with kPowerOfTwo rounded up to a power of two from its bits
// (exponent + 1 when the mantissa is non-zero, never log2f). s is normal (>= 2.2e-7) or +inf.
inline float token_scale(float amax, ScaleMode mode) {
  const float s = (amax > 1e-4f ? amax : 1e-4f) / kE4M3Max;
  if (mode != ScaleMode::kPowerOfTwo) return s;
  const uint32_t u = detail::float_bits(s);
  if ((u >> 23) >= 0xFFu || (u & 0x7FFFFFu) == 0) return s;  // inf, or already a power of two
  return detail::bits_float(((u >> 23) + 1) << 23);
}

// Quantises n values read through load(i): returns s and writes codes[i] = e4m3(x_i / s).
// NaN inputs are ignored by amax (comparisons with NaN are false) and become e4m3 NaN.
template <typename Load>
float quantize_row(Load load, int64_t n, ScaleMode mode, uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = load(i) < 0.0f ? -load(i) : load(i);
    amax = a > amax ? a : amax;
  }
  const float s = token_scale(amax, mode);
  for (int64_t i = 0; i < n; ++i) codes[i] = float_to_e4m3(load(i) / s);
  return s;
}

}  // namespace quantkv::cpu
