// AVX2 microkernels of sparse MLA attention: sparse_mla_impl.hpp on 8 lanes (16 registers:
// score tiles of 2 keys x 4 head vectors (4 x 2 for the last 16 heads), PV tiles of 2 heads x 4
// value vectors).
#include <immintrin.h>

#include "cpu/sparse_mla_impl.hpp"
#include "cpu/sparse_mla_kernels.hpp"

namespace quantkv::cpu {
namespace {

struct Avx2Lanes {
  using Vec = __m256;
  static constexpr int64_t kLanes = 8;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float x) { return _mm256_set1_ps(x); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  // Lane i active when i < n.
  static __m256i mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec load_n(const float* p, int64_t n) {
    return n == kLanes ? load(p) : _mm256_maskload_ps(p, mask(n));
  }
  static void store_n(float* p, Vec v, int64_t n) {
    if (n == kLanes) {
      store(p, v);
    } else {
      _mm256_maskstore_ps(p, mask(n), v);
    }
  }
};

}  // namespace

void sparse_mla_score_avx2(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                           int64_t d_qk, float sm_scale, float* s) {
  sparse_mla_score<Avx2Lanes, 2, 4, 4, 2>(q_t, hp, k, ld_k, nk, d_qk, sm_scale, s);
}

void sparse_mla_pv_avx2(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                        int64_t nk, int64_t d_v, float* acc) {
  sparse_mla_pv<Avx2Lanes, 2, 4>(p, hp, hb, val, ld_v, nk, d_v, acc);
}

}  // namespace quantkv::cpu
