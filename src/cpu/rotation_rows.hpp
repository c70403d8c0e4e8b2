// Internal: the row drivers of the vector rotations, one copy for rotation_avx2.cpp and
// rotation_avx512.cpp. V is the ISA's lane set: kLanes floats per vector `V::Vec` (a GCC / Clang
// vector type, so + - * are the lane-wise IEEE operations: vaddps, vsubps, vmulps) and its
// microkernels rope_interleaved (kLanes/2 pairs), rope_half (kLanes pairs) and butterflies
// (stages h < kLanes inside one vector).
// Header-only with internal linkage: each ISA file instantiates it with its own flags (and
// -ffp-contract=off), and no copy can reach the scalar path (scripts/check_isa_symbols.sh).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/rotation_kernels.hpp"

namespace quantkv::cpu {
namespace {

// Unaligned load / store of one vector.
template <typename Vec>
inline Vec load_lanes(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename Vec>
inline void store_lanes(float* p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename V>
inline void rope_row_lanes(float* x, const float* cs, int64_t rope_dim, RopeLayout layout) {
  const int64_t pairs = rope_dim / 2;
  int64_t i = 0;
  if (layout == RopeLayout::kInterleaved) {
    for (; i + V::kLanes / 2 <= pairs; i += V::kLanes / 2)
      V::rope_interleaved(x + 2 * i, cs + 2 * i);
  } else {
    for (; i + V::kLanes <= pairs; i += V::kLanes) V::rope_half(x + i, x + pairs + i, cs + 2 * i);
  }
  rope_pairs_scalar(x, cs, i, pairs, rope_dim, layout);
}

template <typename V>
inline void hadamard_row_lanes(float* x, int64_t n, float scale) {
  constexpr int64_t kLanes = V::kLanes;
  if (n < kLanes) return hadamard_row_scalar(x, n, scale);
  using Vec = typename V::Vec;
  for (int64_t j = 0; j < n; j += kLanes)
    store_lanes(x + j, V::butterflies(load_lanes<Vec>(x + j)));
  for (int64_t h = kLanes; h < n; h *= 2) {
    for (int64_t j0 = 0; j0 < n; j0 += 2 * h) {
      for (int64_t j = j0; j < j0 + h; j += kLanes) {
        const Vec a = load_lanes<Vec>(x + j), b = load_lanes<Vec>(x + j + h);
        store_lanes(x + j, a + b);
        store_lanes(x + j + h, a - b);
      }
    }
  }
  for (int64_t j = 0; j < n; j += kLanes) store_lanes(x + j, load_lanes<Vec>(x + j) * scale);
}

}  // namespace
}  // namespace quantkv::cpu
