// fp32 arithmetic the demo needs beside the library's operations: the indexer's own
// projections (DeepSeek-V3.2's wq_b, wk and weights_proj, which are plain GEMMs outside the
// library's scope) and the fp32 reference the quantised path is judged against.
#pragma once

#include <cstdint>

namespace quantkv::tool {

// c[i, j] = sum_k a[i, k] * b[j, k], all row-major fp32 (b holds one output column per row,
// like a weight matrix). Runs on `threads` OpenMP threads; AVX2 + FMA when the CPU has them.
void matmul_nt(const float* a,  // [m, k]
               int64_t m, int64_t k,
               const float* b,  // [n, k]
               int64_t n,
               float* c,  // [m, n]
               int threads);

namespace detail {
using MatmulFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_nt_scalar(const float* a, int64_t m, int64_t k, const float* b, int64_t n, float* c,
                      int threads);
void matmul_nt_avx2(const float* a, int64_t m, int64_t k, const float* b, int64_t n, float* c,
                    int threads);
}  // namespace detail

}  // namespace quantkv::tool
