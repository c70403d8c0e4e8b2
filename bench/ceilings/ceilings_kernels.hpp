// Per-ISA inner loops of the ceiling measurements. Each compute loop returns the multiply-adds
// done; each read loop returns the xor of the words it read.
#pragma once

#include <cstdint>

namespace quantkv::ceilings {
// `iters` iterations of `accumulators` independent chains held in named registers; the result
// sinks into *sink. The callers try several chain counts and keep the fastest.
int64_t bf16_dot_loop_avx512bf16(int accumulators, int64_t iters, float* sink);  // 8, 12, 16
int64_t int8_dot_loop_avx512(int accumulators, int64_t iters, int32_t* sink);    // 8, 12, 16
int64_t f32_fma_loop_avx512(int accumulators, int64_t iters, float* sink);       // 8, 12, 16
int64_t f32_fma_loop_avx2(int accumulators, int64_t iters, float* sink);         // 6, 8, 10, 12
int64_t int8_dot_loop_avx2(int accumulators, int64_t iters, int32_t* sink);      // 6, 8, 10
// Without AVX2: 128-bit vectors of the baseline ISA (SSE2 on x86-64, NEON on aarch64), the
// widest the scalar kernels can be compiled to. f32 multiply + add (2 flops) and int16
// multiply + add (one int8-sized multiply-add per lane).
int64_t f32_mul_add_loop_generic(int accumulators, int64_t iters, float* sink);      // 8, 12
int64_t int16_mul_add_loop_generic(int accumulators, int64_t iters, int32_t* sink);  // 8, 12

// Streaming reads of `words` words: several independent chains of the ISA's widest loads.
uint64_t read_stream_avx512(const uint64_t* data, int64_t words);
uint64_t read_stream_avx2(const uint64_t* data, int64_t words);
uint64_t read_stream_generic(const uint64_t* data, int64_t words);
}  // namespace quantkv::ceilings
