// Per-ISA variants of the bulk row conversions declared in quantkv/formats.hpp.
// Each variant lives in its own translation unit compiled with its own ISA flags.
#pragma once

#include <cstdint>

namespace quantkv::cpu {

void convert_e4m3_to_bf16_scalar(const uint8_t* src, uint16_t* dst, int64_t n);
void convert_e4m3_to_f32_scalar(const uint8_t* src, float* dst, int64_t n);
void convert_e2m1_to_doubled_int8_scalar(const uint8_t* packed, int8_t* dst, int64_t n);

void convert_e4m3_to_bf16_avx2(const uint8_t* src, uint16_t* dst, int64_t n);
void convert_e4m3_to_f32_avx2(const uint8_t* src, float* dst, int64_t n);
void convert_e2m1_to_doubled_int8_avx2(const uint8_t* packed, int8_t* dst, int64_t n);

void convert_e4m3_to_bf16_avx512(const uint8_t* src, uint16_t* dst, int64_t n);
void convert_e4m3_to_f32_avx512(const uint8_t* src, float* dst, int64_t n);
void convert_e2m1_to_doubled_int8_avx512(const uint8_t* packed, int8_t* dst, int64_t n);

}  // namespace quantkv::cpu
