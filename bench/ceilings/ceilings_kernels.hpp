// Per-ISA inner loops of the ceiling measurements. Each returns the multiply-adds done.
#pragma once

#include <cstdint>

namespace quantkv::ceilings {
// `iters` iterations of independent accumulator chains; the result sinks into *sink.
// AVX-512 loops take the number of accumulator chains (8, 12 or 16).
int64_t bf16_dot_loop_avx512(int accumulators, int64_t iters, float* sink);
int64_t int8_dot_loop_avx512(int accumulators, int64_t iters, int32_t* sink);
int64_t f32_fma_loop_avx2(int64_t iters, float* sink);
int64_t int8_dot_loop_avx2(int64_t iters, int32_t* sink);
// aarch64: the baseline NEON loops, SDOT (dotprod) and BFMLALB/T (BF16).
int64_t f32_fma_loop_neon(int64_t iters, float* sink);
int64_t int8_dot_loop_neon(int64_t iters, int32_t* sink);
int64_t int8_dot_loop_neon_dotprod(int64_t iters, int32_t* sink);
int64_t bf16_dot_loop_neon_bf16(int64_t iters, float* sink);
}  // namespace quantkv::ceilings
