#include "glue_math.hpp"

#include "glue_math_impl.hpp"
#include "quantkv/cpu_features.hpp"

namespace quantkv::tool {

void detail::matmul_nt_scalar(const float* a, int64_t m, int64_t k, const float* b, int64_t n,
                              float* c, int threads) {
  matmul_nt_body(a, m, k, b, n, c, threads);
}

void matmul_nt(const float* a, int64_t m, int64_t k, const float* b, int64_t n, float* c,
               int threads) {
#if defined(QUANTKV_TOOL_X86)
  if (active_isa() != IsaLevel::kScalar) return detail::matmul_nt_avx2(a, m, k, b, n, c, threads);
#endif
  detail::matmul_nt_scalar(a, m, k, b, n, c, threads);
}

}  // namespace quantkv::tool
