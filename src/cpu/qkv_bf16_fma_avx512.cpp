// AVX-512 pair kernels of the GEMM core for the bf16-order modes (MXFP8, and the weight-only
// W4A16 / W8A16) on CPUs without AVX512_BF16 (Ice Lake, Cascade Lake servers): each bf16 pair
// vector is split into its odd and even halves as exact fp32 (a mask and a shift) and the block
// sum is replayed with two fma per pair, t = fma(a_odd, b_odd, t), t = fma(a_even, b_even, t):
// the products are exact (and finite: run_gemm_batch gives activations whose products could
// overflow to the scalar kernels), so each fma rounds like the add of the canonical order
// (qkv_kernels.hpp), and the bits equal the scalar kernel's and vdpbf16ps's. Twice the lanes of
// the AVX2 replay, and the decode-sized M reads the weight once without a panel.
#include "cpu/qkv_bf16_avx512_impl.hpp"

namespace quantkv::cpu {
namespace {

struct FmaReplay {
  struct W {
    __m512 odd, even;
  };
  using A = W;
  static W weight(__m512i v) {
    return {_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int32_t(0xFFFF0000u)))),
            _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))};
  }
  static A activation(uint32_t unit) {
    return {_mm512_castsi512_ps(_mm512_set1_epi32(int32_t(unit & 0xFFFF0000u))),
            _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(unit << 16)))};
  }
  static __m512 step(__m512 t, W w, A a) {
    t = _mm512_fmadd_ps(a.odd, w.odd, t);
    return _mm512_fmadd_ps(a.even, w.even, t);
  }
};

}  // namespace

void qkv_mxfp8_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  bf16_order_mxfp8_pair<FmaReplay>(p, pair, panel);
}

void qkv_fp4_bf16_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  bf16_order_fp4_pair<FmaReplay>(p, pair, panel);
}

}  // namespace quantkv::cpu
