// Dispatch of the bulk row conversions to the active ISA level.
#include "quantkv/formats.hpp"

#include "cpu/convert_kernels.hpp"
#include "cpu/dispatch.hpp"

namespace quantkv {

void convert_e4m3_to_bf16(const uint8_t* src, uint16_t* dst, int64_t n) {
  select_kernel(cpu::convert_e4m3_to_bf16_scalar, QUANTKV_AVX2_OR_NULL(cpu::convert_e4m3_to_bf16_avx2),
                QUANTKV_AVX512_OR_NULL(cpu::convert_e4m3_to_bf16_avx512))(src, dst, n);
}

void convert_e4m3_to_f32(const uint8_t* src, float* dst, int64_t n) {
  select_kernel(cpu::convert_e4m3_to_f32_scalar, QUANTKV_AVX2_OR_NULL(cpu::convert_e4m3_to_f32_avx2),
                QUANTKV_AVX512_OR_NULL(cpu::convert_e4m3_to_f32_avx512))(src, dst, n);
}

void convert_e2m1_to_doubled_int8(const uint8_t* packed, int8_t* dst, int64_t n) {
  select_kernel(cpu::convert_e2m1_to_doubled_int8_scalar,
                QUANTKV_AVX2_OR_NULL(cpu::convert_e2m1_to_doubled_int8_avx2),
                QUANTKV_AVX512_OR_NULL(cpu::convert_e2m1_to_doubled_int8_avx512))(packed, dst, n);
}

}  // namespace quantkv
