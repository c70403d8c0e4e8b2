#include "linear_reference.hpp"

#include "qkv_fp4_reference.hpp"

namespace quantkv::reference {

void linear_reference(const LinearReferenceArgs& a) {
  const int64_t rb = row_bytes(a.format, a.k);
  for (int64_t m = 0; m < a.m; ++m) {
    for (int64_t n = 0; n < a.n; ++n) {
      const uint8_t* w = a.weight + n * rb;
      const float c =
          a.x != nullptr
              ? qkv_gemm_element(a.format, a.x + m * rb, w, a.x_scale, a.weight_scale, m, n, a.k)
              : weight_only_gemm_element(a.format, a.x_bf16 + m * a.k, w, a.weight_scale, n, a.k);
      float y = c * (a.column_alpha != nullptr ? a.column_alpha[n] : a.alpha);
      if (a.bias != nullptr) y += a.bias[n];
      if (a.bias_bf16 != nullptr) y += bf16_to_float(a.bias_bf16[n]);
      if (a.y_f32 != nullptr) {
        a.y_f32[m * a.n + n] = y;
      } else {
        a.y[m * a.n + n] = float_to_bf16(y);
      }
    }
  }
}

}  // namespace quantkv::reference
