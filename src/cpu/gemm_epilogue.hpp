// Internal: the epilogues of the block-scaled GEMM core (contract §4). The pair kernels hand
// every finished fp32 tile of c (rows x the pair's columns) to the problem's epilogue, a
// plug-in: a function and its state. The kernels never know where c goes (the CUTLASS way):
//   PagedKvEpilogue  the fused QKV: Q columns -> bf16 output rows, K/V columns -> the paged
//                    cache at cache_length + i, converted once to the cache dtype;
//   RowEpilogue      the plain linear layer: y[m, n] = c * alpha(n) (+ bias[n]) -> bf16 / fp32;
//                    the fused experts use it too (fp32 scratch rows with the expert's factor
//                    and bias; their combine runs after both GEMMs, src/cpu/moe_driver.cpp).
// The epilogues are compiled once, without ISA flags (src/cpu/gemm_epilogue.cpp): a tile of
// kRowTile x 32 values costs a few hundred conversions against the tile's 2 * 192 * K flops.
// Every variant is exact (integer RNE for bf16, the shared scalar codecs otherwise), so the
// bits do not depend on the ISA path.
#pragma once

#include <cstdint>

#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::cpu {

// Stores rows [m0, m0 + rows) x columns [n0, n0 + cols) of c from `tile` (row stride `ld`).
using StoreTileFn = void (*)(const void* self, int64_t m0, int rows, int64_t n0, int cols,
                             const float* tile, int ld);

struct GemmEpilogue {
  StoreTileFn store = nullptr;
  const void* self = nullptr;  // the epilogue's state (one of the structs below)
  void operator()(int64_t m0, int rows, int64_t n0, int cols, const float* tile, int ld) const {
    store(self, m0, rows, n0, cols, tile, ld);
  }
};

// The fused QKV's epilogue: c * sf of the column's section (q, k, v).
struct PagedKvEpilogue {
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
  GemmEpilogue plug() const { return {store_tile, this}; }
  static void store_tile(const void* self, int64_t m0, int rows, int64_t n0, int cols,
                         const float* tile, int ld);
};

// The plain linear layer's epilogue: y = fl(c * alpha(n)), then + bias[n] in fp32 when there is
// a bias, then rounded to bf16 (RNE) or stored as fp32. alpha(n) = column_alpha[n] when given,
// else alpha. (Without a bias the bf16 rows equal the fused QKV's Q for alpha = sf_q.)
struct RowEpilogue {
  float alpha = 1.0f;
  const float* column_alpha = nullptr;  // [N] or null
  const float* bias_f32 = nullptr;      // [N] or null
  const uint16_t* bias_bf16 = nullptr;  // [N] bf16 bits or null
  uint16_t* out_bf16 = nullptr;         // [M, N] rows of out_stride elements (one of the two)
  float* out_f32 = nullptr;
  int64_t out_stride = 0;
  GemmEpilogue plug() const { return {store_tile, this}; }
  static void store_tile(const void* self, int64_t m0, int rows, int64_t n0, int cols,
                         const float* tile, int ld);
};

}  // namespace quantkv::cpu
