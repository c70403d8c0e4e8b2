// Internal: the microkernels of sparse MLA attention (quantkv/sparse_mla.hpp; the driver is
// src/cpu/sparse_mla_driver.cpp). Both replay the canonical order of docs/sparse_mla.md per
// output element, so every variant gives the same bits:
//  - score: one fma chain over d in index order starting at 0, then one multiply by sm_scale;
//  - PV: one fma chain over the keys in j order, continued across calls through `acc`.
// Heads are the vector lanes of the score kernel (hp, the padded head count, is a multiple of
// kSparseMlaHeadPad) and values the lanes of the PV kernel; no lane ever mixes two chains.
// Variants: scalar, AVX2, AVX-512 (x86-64), NEON (aarch64).
#pragma once

#include <cstdint>

namespace quantkv::cpu {

// The head count of a work item is padded to a multiple of this (zero queries in the padding).
inline constexpr int64_t kSparseMlaHeadPad = 16;

// s[j * hp + h] = fl(sm_scale * chain_d fma(q_t[d * hp + h], k[j * ld_k + d]))
// for h < hp, j < nk, d < d_qk (q_t [d_qk, hp]: the item's queries transposed, fp32; k [nk,
// ld_k]: the dequantised keys, fp32).
using SparseMlaScoreFn = void (*)(const float* q_t, int64_t hp, const float* k, int64_t ld_k,
                                  int64_t nk, int64_t d_qk, float sm_scale, float* s);
// acc[h * d_v + v] = fma(p[j * hp + h], val[j * ld_v + v], acc[h * d_v + v]) for j = 0 .. nk-1
// in order, for h < hb, v < d_v (p [nk, hp] the softmax numerators; val [nk, ld_v]).
using SparseMlaPvFn = void (*)(const float* p, int64_t hp, int64_t hb, const float* val,
                               int64_t ld_v, int64_t nk, int64_t d_v, float* acc);

// The kernel table's entry (src/cpu/kernels.hpp: kernels().sparse_mla); never null.
struct SparseMlaKernels {
  SparseMlaScoreFn score = nullptr;
  SparseMlaPvFn pv = nullptr;
};

void sparse_mla_score_scalar(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                             int64_t d_qk, float sm_scale, float* s);
void sparse_mla_pv_scalar(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                          int64_t nk, int64_t d_v, float* acc);
void sparse_mla_score_avx2(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                           int64_t d_qk, float sm_scale, float* s);
void sparse_mla_pv_avx2(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                        int64_t nk, int64_t d_v, float* acc);
void sparse_mla_score_avx512(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                             int64_t d_qk, float sm_scale, float* s);
void sparse_mla_pv_avx512(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                          int64_t nk, int64_t d_v, float* acc);
void sparse_mla_score_neon(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                           int64_t d_qk, float sm_scale, float* s);
void sparse_mla_pv_neon(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                        int64_t nk, int64_t d_v, float* acc);

}  // namespace quantkv::cpu
