// The body of matmul_nt, compiled once per ISA (glue_math.cpp, glue_math_avx2.cpp) so the
// compiler vectorises it for each; included only by those two files.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/threads.hpp"
#include "quantkv/context.hpp"

namespace quantkv::tool::detail {
namespace {

// Four rows of `a` share every row of `b` that is loaded; a block of `b` rows small enough
// for L2 is reused by all rows of `a` before the next block.
inline void matmul_nt_body(const float* a, int64_t m, int64_t k, const float* b, int64_t n,
                           float* c, int threads) {
  constexpr int64_t kRows = 4;
  const int64_t col_block =
      std::max<int64_t>(8, (int64_t(256) << 10) / (4 * std::max<int64_t>(k, 1)));
  const int64_t col_blocks = (n + col_block - 1) / col_block;
  const int64_t row_blocks = (m + kRows - 1) / kRows;
  Context ctx;
  ctx.num_threads = threads;
  const int used = threads_for_work(ctx, double(m) * double(n) * double(k), kMinMacsPerThread);
#pragma omp parallel for collapse(2) schedule(static) num_threads(used) if (used > 1)
  for (int64_t cb = 0; cb < col_blocks; ++cb) {
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
      const int64_t i0 = rb * kRows;
      const int64_t rows = std::min(kRows, m - i0);
      // Rows past the end repeat the last row; their sums are dropped.
      const float* a0 = a + i0 * k;
      const float* a1 = a + (i0 + std::min<int64_t>(1, rows - 1)) * k;
      const float* a2 = a + (i0 + std::min<int64_t>(2, rows - 1)) * k;
      const float* a3 = a + (i0 + std::min<int64_t>(3, rows - 1)) * k;
      const int64_t j_end = std::min(n, (cb + 1) * col_block);
      for (int64_t j = cb * col_block; j < j_end; ++j) {
        const float* bj = b + j * k;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t kk = 0; kk < k; ++kk) {
          const float bv = bj[kk];
          s0 += a0[kk] * bv;
          s1 += a1[kk] * bv;
          s2 += a2[kk] * bv;
          s3 += a3[kk] * bv;
        }
        const float sums[kRows] = {s0, s1, s2, s3};
        for (int64_t r = 0; r < rows; ++r) c[(i0 + r) * n + j] = sums[r];
      }
    }
  }
}

}  // namespace
}  // namespace quantkv::tool::detail
