// The scalar microkernels of sparse MLA attention (sparse_mla_kernels.hpp): the canonical order
// written out with std::fma, the fallback on every CPU and the order the vector variants replay.
#include <cmath>

#include "cpu/sparse_mla_kernels.hpp"

namespace quantkv::cpu {

void sparse_mla_score_scalar(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                             int64_t d_qk, float sm_scale, float* s) {
  for (int64_t j = 0; j < nk; ++j) {
    const float* kj = k + j * ld_k;
    for (int64_t h = 0; h < hp; ++h) {
      float acc = 0.0f;
      for (int64_t d = 0; d < d_qk; ++d) acc = std::fma(q_t[d * hp + h], kj[d], acc);
      s[j * hp + h] = acc * sm_scale;
    }
  }
}

void sparse_mla_pv_scalar(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                          int64_t nk, int64_t d_v, float* acc) {
  for (int64_t h = 0; h < hb; ++h) {
    float* a = acc + h * d_v;
    for (int64_t j = 0; j < nk; ++j) {
      const float pj = p[j * hp + h];
      const float* vj = val + j * ld_v;
      for (int64_t v = 0; v < d_v; ++v) a[v] = std::fma(pj, vj[v], a[v]);
    }
  }
}

}  // namespace quantkv::cpu
