// The GEMM core's epilogues (see gemm_epilogue.hpp). Compiled without ISA flags: any CPU.
#include "cpu/gemm_epilogue.hpp"

namespace quantkv::cpu {
namespace {

// Converts `count` values c * sf to the cache dtype at element offset `dst`.
void store_cache_run(void* cache, DType dtype, int64_t dst, const float* c, int64_t count,
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

}  // namespace

void PagedKvEpilogue::store_tile(const void* self, int64_t m0, int rows, int64_t n0, int cols,
                                 const float* tile, int ld) {
  const PagedKvEpilogue& e = *static_cast<const PagedKvEpilogue*>(self);
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

void RowEpilogue::store_tile(const void* self, int64_t m0, int rows, int64_t n0, int cols,
                             const float* tile, int ld) {
  const RowEpilogue& e = *static_cast<const RowEpilogue*>(self);
  float y[64];  // cols <= kPairCols
  for (int r = 0; r < rows; ++r) {
    const float* c = tile + int64_t(r) * ld;
    if (e.column_alpha != nullptr) {
      for (int i = 0; i < cols; ++i) y[i] = c[i] * e.column_alpha[n0 + i];
    } else {
      for (int i = 0; i < cols; ++i) y[i] = c[i] * e.alpha;
    }
    if (e.bias_f32 != nullptr) {
      for (int i = 0; i < cols; ++i) y[i] += e.bias_f32[n0 + i];
    } else if (e.bias_bf16 != nullptr) {
      for (int i = 0; i < cols; ++i) y[i] += bf16_to_float(e.bias_bf16[n0 + i]);
    }
    const int64_t row = (m0 + r) * e.out_stride + n0;
    if (e.out_f32 != nullptr) {
      for (int i = 0; i < cols; ++i) e.out_f32[row + i] = y[i];
    } else {
      for (int i = 0; i < cols; ++i) e.out_bf16[row + i] = float_to_bf16(y[i]);
    }
  }
}

}  // namespace quantkv::cpu
