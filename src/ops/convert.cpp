// The bulk row conversions of formats.hpp: entry points that dispatch to the active ISA level's
// kernels (src/cpu/kernels.hpp), so they live in ops/ (core/ includes nothing from cpu/).
#include "cpu/kernels.hpp"
#include "quantkv/formats.hpp"

namespace quantkv {

void convert_e4m3_to_bf16(const uint8_t* src, uint16_t* dst, int64_t n) {
  cpu::kernels().convert.e4m3_to_bf16(src, dst, n);
}

void convert_e4m3_to_f32(const uint8_t* src, float* dst, int64_t n) {
  cpu::kernels().convert.e4m3_to_f32(src, dst, n);
}

void convert_e2m1_to_doubled_int8(const uint8_t* packed, int8_t* dst, int64_t n) {
  cpu::kernels().convert.e2m1_to_doubled_int8(packed, dst, n);
}

}  // namespace quantkv
