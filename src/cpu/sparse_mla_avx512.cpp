// AVX-512 microkernels of sparse MLA attention: sparse_mla_impl.hpp on 16 lanes (32 registers:
// score tiles of 6 keys x 4 head vectors (8 x 1 for
// the remaining heads), PV tiles of 6 heads x 4 value vectors).
#include <immintrin.h>

#include "cpu/sparse_mla_impl.hpp"
#include "cpu/sparse_mla_kernels.hpp"

namespace quantkv::cpu {
namespace {

struct Avx512Lanes {
  using Vec = __m512;
  static constexpr int64_t kLanes = 16;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static __mmask16 mask(int64_t n) { return __mmask16((1u << n) - 1u); }
  static Vec load_n(const float* p, int64_t n) {
    return n == kLanes ? load(p) : _mm512_maskz_loadu_ps(mask(n), p);
  }
  static void store_n(float* p, Vec v, int64_t n) {
    if (n == kLanes) {
      store(p, v);
    } else {
      _mm512_mask_storeu_ps(p, mask(n), v);
    }
  }
};

}  // namespace

void sparse_mla_score_avx512(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                             int64_t d_qk, float sm_scale, float* s) {
  sparse_mla_score<Avx512Lanes, 6, 4, 8, 1>(q_t, hp, k, ld_k, nk, d_qk, sm_scale, s);
}

void sparse_mla_pv_avx512(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                          int64_t nk, int64_t d_v, float* acc) {
  sparse_mla_pv<Avx512Lanes, 6, 4>(p, hp, hb, val, ld_v, nk, d_v, acc);
}

}  // namespace quantkv::cpu
