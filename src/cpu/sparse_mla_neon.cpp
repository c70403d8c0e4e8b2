// NEON microkernels of sparse MLA attention (the aarch64 baseline): sparse_mla_impl.hpp on 4
// lanes (32 registers: score tiles of 6 keys x 16 heads, PV tiles of 6 heads x 16 values);
// vfmaq_f32 rounds once, as std::fma. Partial vectors go through a zeroed stack copy.
#include <arm_neon.h>

#include <cstring>

#include "cpu/sparse_mla_impl.hpp"
#include "cpu/sparse_mla_kernels.hpp"

namespace quantkv::cpu {
namespace {

struct NeonLanes {
  using Vec = float32x4_t;
  static constexpr int64_t kLanes = 4;
  static Vec zero() { return vdupq_n_f32(0.0f); }
  static Vec set1(float x) { return vdupq_n_f32(x); }
  static Vec load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, Vec v) { vst1q_f32(p, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return vfmaq_f32(c, a, b); }
  static Vec mul(Vec a, Vec b) { return vmulq_f32(a, b); }
  static Vec load_n(const float* p, int64_t n) {
    if (n == kLanes) return load(p);
    float tmp[kLanes] = {};
    std::memcpy(tmp, p, std::size_t(n) * sizeof(float));
    return vld1q_f32(tmp);
  }
  static void store_n(float* p, Vec v, int64_t n) {
    if (n == kLanes) {
      store(p, v);
      return;
    }
    float tmp[kLanes];
    vst1q_f32(tmp, v);
    std::memcpy(p, tmp, std::size_t(n) * sizeof(float));
  }
};

}  // namespace

void sparse_mla_score_neon(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                           int64_t d_qk, float sm_scale, float* s) {
  sparse_mla_score<NeonLanes, 6, 4, 6, 4>(q_t, hp, k, ld_k, nk, d_qk, sm_scale, s);
}

void sparse_mla_pv_neon(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                        int64_t nk, int64_t d_v, float* acc) {
  sparse_mla_pv<NeonLanes, 6, 4>(p, hp, hb, val, ld_v, nk, d_v, acc);
}

}  // namespace quantkv::cpu
