// AVX-512 BF16 pair kernels of the fused QKV projection: MXFP8 and weight-only fp4 (compiled
// with the AVX-512 flags plus BF16: the _avx512bf16 suffix; the kernel table uses them only
// where the CPU has AVX512_BF16 and its vdpbf16ps follows the canonical order).
//
// e4m3 is exact in bf16, so the pair's prepared e4m3 weight is widened once per call into a
// bf16 panel (16 columns x 2 k per vector) and vdpbf16ps accumulates each 32-value block into
// a block sum that starts at zero: per lane t = (t + a[2p+1] b[2p+1]) + a[2p] b[2p], every
// product exact, every sum rounded to nearest even — the order the scalar kernels replay.
// DAZ/FTZ of vdpbf16ps never matter here: products of e4m3 values are >= 2^-18 and every
// partial sum is a multiple of 2^-18. One fma per block applies the e8m0 scales.
#include <immintrin.h>

#include <bit>

#include "cpu/qkv_avx512.hpp"
#include "cpu/qkv_bf16_avx512_impl.hpp"
#include "cpu/qkv_kernels.hpp"
#include "cpu/simd/avx512.hpp"

namespace quantkv::cpu {
namespace {

// One step: vdpbf16ps, which rounds in the canonical order (probed below before use).
struct DpBf16 {
  using W = __m512i;
  using A = __m512i;
  static W weight(__m512i v) { return v; }
  static A activation(uint32_t unit) { return _mm512_set1_epi32(int32_t(unit)); }
  static __m512 step(__m512 t, W w, A a) { return _mm512_dpbf16_ps(t, (__m512bh)w, (__m512bh)a); }
};

}  // namespace

bool mxfp8_avx512bf16_matches_canonical_order() {
  // Random e4m3 values as bf16 and random partial sums; the canonical step
  // t = (t + a_odd b_odd) + a_even b_even is replayed in scalar fp32. A CPU whose vdpbf16ps
  // rounds in another order (or fuses the two products) fails within a few lanes.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(state >> 33);
  };
  for (int v = 0; v < 64; ++v) {
    alignas(64) uint16_t a[32], b[32];
    alignas(64) float t[16], got[16];
    for (int i = 0; i < 32; ++i) {
      uint8_t ca = uint8_t(next()), cb = uint8_t(next());
      if ((ca & 0x7F) == 0x7F) ca = 0x7E;
      if ((cb & 0x7F) == 0x7F) cb = 0x7E;
      a[i] = e4m3_to_bf16_bits(ca);
      b[i] = e4m3_to_bf16_bits(cb);
    }
    for (int l = 0; l < 16; ++l) t[l] = float(int32_t(next() % 2000001) - 1000000) * 0x1p-7f;
    _mm512_store_ps(got, _mm512_dpbf16_ps(_mm512_load_ps(t), (__m512bh)_mm512_load_si512(a),
                                          (__m512bh)_mm512_load_si512(b)));
    for (int l = 0; l < 16; ++l) {
      float want = t[l] + bf16_bits_to_float(a[2 * l + 1]) * bf16_bits_to_float(b[2 * l + 1]);
      want = want + bf16_bits_to_float(a[2 * l]) * bf16_bits_to_float(b[2 * l]);
      if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got[l]))
        return false;  // bitwise
    }
  }
  return true;
}

void qkv_mxfp8_pair_avx512bf16(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  bf16_order_mxfp8_pair<DpBf16>(p, pair, panel);
}

void qkv_fp4_bf16_pair_avx512bf16(const QkvProblem& p, int64_t pair, uint8_t* panel) {
  bf16_order_fp4_pair<DpBf16>(p, pair, panel);
}

}  // namespace quantkv::cpu
