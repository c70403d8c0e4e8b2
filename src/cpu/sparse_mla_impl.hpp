// Internal: the vector microkernels of sparse MLA attention, one copy for sparse_mla_avx2.cpp,
// sparse_mla_avx512.cpp and sparse_mla_neon.cpp (sparse_mla_kernels.hpp states what they compute).
// L is the ISA's lane set: kLanes floats per vector L::Vec, zero / set1 / load / store / fma(a, b,
// c) = a*b+c rounded once / mul, and load_n / store_n for the first n < kLanes lanes.
//  - score: heads are the lanes; a tile of NJ keys x NH head vectors keeps NJ*NH fma chains in
//    registers, each over d in index order from 0, then one multiply by sm_scale (the scalar
//    kernel's std::fma chain per (j, h), bit for bit).
//  - PV: values are the lanes; a tile of NH heads x NV value vectors continues its chains from
//    acc over the keys in j order (the scalar kernel's chain per (h, v)); the value tail runs
//    masked lanes, whose loads read zeros and whose stores write nothing.
// Header-only with internal linkage: each ISA file instantiates it with its own flags, and no
// copy can reach the scalar path (scripts/check_isa_symbols.sh).
#pragma once

#include <cstdint>

#include "cpu/sparse_mla_kernels.hpp"

namespace quantkv::cpu {
namespace {

template <typename L, int NJ, int NH>
inline void sparse_mla_score_tile(const float* q_t, int64_t hp, const float* k, int64_t ld_k,
                                  int64_t d_qk, float sm_scale, float* s) {
  using Vec = typename L::Vec;
  Vec acc[NJ][NH];
  for (int j = 0; j < NJ; ++j) {
    for (int i = 0; i < NH; ++i) acc[j][i] = L::zero();
  }
  for (int64_t d = 0; d < d_qk; ++d) {
    Vec qv[NH];
    for (int i = 0; i < NH; ++i) qv[i] = L::load(q_t + d * hp + i * L::kLanes);
    for (int j = 0; j < NJ; ++j) {
      const Vec kb = L::set1(k[j * ld_k + d]);
      for (int i = 0; i < NH; ++i) acc[j][i] = L::fma(qv[i], kb, acc[j][i]);
    }
  }
  const Vec scale = L::set1(sm_scale);
  for (int j = 0; j < NJ; ++j) {
    for (int i = 0; i < NH; ++i) L::store(s + j * hp + i * L::kLanes, L::mul(acc[j][i], scale));
  }
}

// All nk keys for head vectors [h0, h0 + NH * kLanes): tiles of NJ keys, the rest in tiles of
// NJ / 2, NJ / 4, ... keys (each key's chains are the same whatever tile holds them).
template <typename L, int NJ, int NH>
inline void sparse_mla_score_heads(const float* q_t, int64_t hp, const float* k, int64_t ld_k,
                                   int64_t nk, int64_t d_qk, float sm_scale, float* s) {
  int64_t j = 0;
  for (; j + NJ <= nk; j += NJ) {
    sparse_mla_score_tile<L, NJ, NH>(q_t, hp, k + j * ld_k, ld_k, d_qk, sm_scale, s + j * hp);
  }
  if constexpr (NJ > 1) {
    if (j < nk) {
      sparse_mla_score_heads<L, NJ / 2, NH>(q_t, hp, k + j * ld_k, ld_k, nk - j, d_qk, sm_scale,
                                            s + j * hp);
    }
  }
}

// Head blocks of NH_WIDE vectors with NJ_WIDE keys, the rest NH_NARROW vectors at a time with
// NJ_NARROW keys (more keys keep enough independent chains in flight). hp (a multiple of
// kSparseMlaHeadPad) must be a multiple of NH_NARROW * kLanes.
template <typename L, int NJ_WIDE, int NH_WIDE, int NJ_NARROW, int NH_NARROW>
inline void sparse_mla_score(const float* q_t, int64_t hp, const float* k, int64_t ld_k, int64_t nk,
                             int64_t d_qk, float sm_scale, float* s) {
  static_assert(kSparseMlaHeadPad % (NH_NARROW * L::kLanes) == 0, "narrow blocks tile the padding");
  int64_t h = 0;
  for (; h + NH_WIDE * L::kLanes <= hp; h += NH_WIDE * L::kLanes) {
    sparse_mla_score_heads<L, NJ_WIDE, NH_WIDE>(q_t + h, hp, k, ld_k, nk, d_qk, sm_scale, s + h);
  }
  for (; h < hp; h += NH_NARROW * L::kLanes) {
    sparse_mla_score_heads<L, NJ_NARROW, NH_NARROW>(q_t + h, hp, k, ld_k, nk, d_qk, sm_scale,
                                                    s + h);
  }
}

// Heads [0, NH) x values [v0, v0 + NV * kLanes) (the last vector: its first `last` lanes).
template <typename L, int NH, int NV>
inline void sparse_mla_pv_tile(const float* p, int64_t hp, const float* val, int64_t ld_v,
                               int64_t nk, int64_t d_v, int64_t last, float* acc) {
  using Vec = typename L::Vec;
  Vec a[NH][NV];
  for (int h = 0; h < NH; ++h) {
    for (int i = 0; i + 1 < NV; ++i) a[h][i] = L::load(acc + h * d_v + i * L::kLanes);
    a[h][NV - 1] = L::load_n(acc + h * d_v + (NV - 1) * L::kLanes, last);
  }
  for (int64_t j = 0; j < nk; ++j) {
    const float* vj = val + j * ld_v;
    Vec v[NV];
    for (int i = 0; i + 1 < NV; ++i) v[i] = L::load(vj + i * L::kLanes);
    v[NV - 1] = L::load_n(vj + (NV - 1) * L::kLanes, last);
    for (int h = 0; h < NH; ++h) {
      const Vec pb = L::set1(p[j * hp + h]);
      for (int i = 0; i < NV; ++i) a[h][i] = L::fma(pb, v[i], a[h][i]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    for (int i = 0; i + 1 < NV; ++i) L::store(acc + h * d_v + i * L::kLanes, a[h][i]);
    L::store_n(acc + h * d_v + (NV - 1) * L::kLanes, a[h][NV - 1], last);
  }
}

// Values [v, v + NV * kLanes) of every head: heads in blocks of NH, the rest in blocks of
// NH / 2, NH / 4, ... (the block of values stays in L1 across the heads).
template <typename L, int NH, int NV>
inline void sparse_mla_pv_values(const float* p, int64_t hp, int64_t hb, const float* val,
                                 int64_t ld_v, int64_t nk, int64_t d_v, int64_t v, int64_t last,
                                 float* acc) {
  int64_t h = 0;
  for (; h + NH <= hb; h += NH) {
    sparse_mla_pv_tile<L, NH, NV>(p + h, hp, val + v, ld_v, nk, d_v, last, acc + h * d_v + v);
  }
  if constexpr (NH > 1) {
    if (h < hb) {
      sparse_mla_pv_values<L, NH / 2, NV>(p + h, hp, hb - h, val, ld_v, nk, d_v, v, last,
                                          acc + h * d_v);
    }
  }
}

// Values in blocks of NV vectors, then one vector at a time (the last one partial).
template <typename L, int NH, int NV>
inline void sparse_mla_pv(const float* p, int64_t hp, int64_t hb, const float* val, int64_t ld_v,
                          int64_t nk, int64_t d_v, float* acc) {
  int64_t v = 0;
  for (; v + NV * L::kLanes <= d_v; v += NV * L::kLanes) {
    sparse_mla_pv_values<L, NH, NV>(p, hp, hb, val, ld_v, nk, d_v, v, L::kLanes, acc);
  }
  for (; v < d_v; v += L::kLanes) {
    const int64_t last = d_v - v < L::kLanes ? d_v - v : L::kLanes;
    sparse_mla_pv_values<L, NH, 1>(p, hp, hb, val, ld_v, nk, d_v, v, last, acc);
  }
}

}  // namespace
}  // namespace quantkv::cpu
