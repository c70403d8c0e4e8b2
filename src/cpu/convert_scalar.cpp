// Scalar bulk conversions: the fallback on every CPU and the oracle of the SIMD variants.
#include "cpu/convert_kernels.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cpu {

void convert_e4m3_to_bf16_scalar(const uint8_t* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_bf16_bits(src[i]);
}

void convert_e4m3_to_f32_scalar(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_float(src[i]);
}

void convert_e2m1_to_doubled_int8_scalar(const uint8_t* packed, int8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = e2m1_to_doubled_int8(e2m1_get(packed, i));
}

}  // namespace quantkv::cpu
