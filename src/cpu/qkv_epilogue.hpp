// Internal: the epilogue of the fused QKV projection (contract §4): an fp32 tile of c is scaled by
// its column section's factor, Q columns are rounded to bf16 into `output`, K/V columns are
// converted once to the cache dtype and stored in their page slot. Header-only so each ISA
// translation unit inlines (and vectorises) it with its own flags; every variant is exact
// (integer RNE for bf16, the shared scalar codecs otherwise).
#pragma once

#include <cstdint>
#include <cstring>

#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::cpu {

struct QkvEpilogue {
  int64_t q_dim = 0;     // columns [0, q_dim) -> output
  int64_t kv_width = 0;  // K columns [q_dim, q_dim + kv_width), V after them (kv_dim 2)
  int64_t n = 0;         // all columns
  float sf_q = 1, sf_k = 1, sf_v = 1;
  uint16_t* out = nullptr;  // bf16 [M, q_dim], row stride out_stride
  int64_t out_stride = 0;
  void* cache = nullptr;  // blocks of the paged cache
  DType dtype = DType::kBF16;
  const int64_t* k_base = nullptr;  // [M] element offset of (page, 0, layer, slot, 0, 0); -1: skip
  const int64_t* v_base = nullptr;  // [M] same for V (kv_dim 2)
};

// The functions below have internal linkage (anonymous namespace): each ISA translation unit
// keeps its own copy, so a non-inlined AVX-512 copy can never be picked by the linker for the
// scalar or AVX2 kernels (which would fault on CPUs without AVX-512).
namespace {
// Converts `count` values c * sf to the cache dtype at element offset `dst`.
inline void store_cache_run(void* cache, DType dtype, int64_t dst, const float* c, int64_t count,
                            float sf) {
  switch (dtype) {
    case DType::kF32: {
      float* p = static_cast<float*>(cache) + dst;
      for (int64_t i = 0; i < count; ++i) p[i] = c[i] * sf;
      break;
    }
    case DType::kBF16: {
      uint16_t* p = static_cast<uint16_t*>(cache) + dst;
      for (int64_t i = 0; i < count; ++i) p[i] = float_to_bf16(c[i] * sf);
      break;
    }
    case DType::kF16: {
      uint16_t* p = static_cast<uint16_t*>(cache) + dst;
      for (int64_t i = 0; i < count; ++i) p[i] = float_to_fp16(c[i] * sf);
      break;
    }
    case DType::kE4M3: {
      uint8_t* p = static_cast<uint8_t*>(cache) + dst;
      for (int64_t i = 0; i < count; ++i) p[i] = float_to_e4m3(c[i] * sf);
      break;
    }
  }
}
// Stores rows [m0, m0 + rows) x columns [n0, n0 + cols) of c from `tile` (row stride `ld`).
inline void store_qkv_tile(const QkvEpilogue& e, int64_t m0, int rows, int64_t n0, int cols,
                           const float* tile, int ld) {
  const int64_t n1 = n0 + cols;
  const int64_t k_end = e.q_dim + e.kv_width;
  for (int r = 0; r < rows; ++r) {
    const int64_t m = m0 + r;
    const float* c = tile + int64_t(r) * ld;
    // Q: [n0, min(n1, q_dim))
    if (n0 < e.q_dim) {
      const int64_t hi = n1 < e.q_dim ? n1 : e.q_dim;
      uint16_t* o = e.out + m * e.out_stride + n0;
      for (int64_t i = 0; i < hi - n0; ++i) o[i] = float_to_bf16(c[i] * e.sf_q);
    }
    // K: [max(n0, q_dim), min(n1, k_end))
    const int64_t klo = n0 > e.q_dim ? n0 : e.q_dim, khi = n1 < k_end ? n1 : k_end;
    if (klo < khi && e.k_base[m] >= 0) {
      store_cache_run(e.cache, e.dtype, e.k_base[m] + (klo - e.q_dim), c + (klo - n0), khi - klo,
                      e.sf_k);
    }
    // V: [max(n0, k_end), min(n1, n))
    const int64_t vlo = n0 > k_end ? n0 : k_end, vhi = n1 < e.n ? n1 : e.n;
    if (vlo < vhi && e.v_base != nullptr && e.v_base[m] >= 0) {
      store_cache_run(e.cache, e.dtype, e.v_base[m] + (vlo - k_end), c + (vlo - n0), vhi - vlo,
                      e.sf_v);
    }
  }
}

}  // namespace
}  // namespace quantkv::cpu
