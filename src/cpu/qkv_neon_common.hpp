// Internal: what the NEON pair kernels of the fused QKV projection share (qkv_fp4_neon_impl.hpp,
// qkv_mxfp8_neon_impl.hpp). Internal linkage, so each ISA file keeps its own copy.
#pragma once

#include <arm_neon.h>

#include "cpu/qkv_kernels.hpp"

namespace quantkv::cpu {
namespace {

constexpr int kNeonQkvRows = 2;  // 2 rows x 16 columns: 8 block sums + 8 accumulators

// 4 bf16 bits -> 4 floats (exact).
inline float32x4_t neon_bf16x4_to_f32(const uint16_t* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

// Runs half_tile<R>(m0, half, tile) for both halves of every row tile of `pair` (R = rows of
// the tile: kNeonQkvRows, or 1 for an odd last row) and stores each finished tile.
template <typename HalfTile>
void for_each_neon_row_tile(const QkvProblem& p, int64_t pair, HalfTile half_tile) {
  for_each_row_tile<kNeonQkvRows>(p, pair, [&](int64_t m0, int rows, float* tile) {
    for (int half = 0; half < 2; ++half) {
      with_static_count<kNeonQkvRows>(
          rows, [&](auto r) { half_tile.template operator()<decltype(r)::value>(m0, half, tile); });
    }
  });
}

}  // namespace
}  // namespace quantkv::cpu
