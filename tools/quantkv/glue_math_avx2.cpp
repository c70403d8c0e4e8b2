// matmul_nt compiled with -mavx2 -mfma (chosen at run time by glue_math.cpp).
#include "glue_math.hpp"
#include "glue_math_impl.hpp"

namespace quantkv::tool {

void detail::matmul_nt_avx2(const float* a, int64_t m, int64_t k, const float* b, int64_t n,
                            float* c, int threads) {
  matmul_nt_body(a, m, k, b, n, c, threads);
}

}  // namespace quantkv::tool
