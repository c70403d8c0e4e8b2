// Internal: per-ISA row kernels of the companion quantisers (contract §5), shared by
// src/ops/quantize.cpp (block-scaled NVFP4 / MXFP4 / MXFP8) and src/ops/indexer_k_store.cpp /
// src/ops/indexer_q_prepare.cpp (per-token e4m3). Every variant runs the scalar recipe's IEEE
// fp32 operations in the same order (src/core/recipes.hpp), so all agree bit for bit.
#pragma once

#include <cstdint>

#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/quantize.hpp"

namespace quantkv::cpu {

// One contiguous row x [K] (K a multiple of SF_VECTOR_SIZE) -> data (row_bytes(f, K) bytes) and
// sf [K / SF_VECTOR_SIZE] block scale codes. g / inv_g = fl(1 / g) are used by NVFP4 only.
using BlockQuantizeF32 = void (*)(const float* x, int64_t k, BlockFormat f, float g, float inv_g,
                                  uint8_t* data, uint8_t* sf);
using BlockQuantizeBf16 = void (*)(const uint16_t* x, int64_t k, BlockFormat f, float g,
                                   float inv_g, uint8_t* data, uint8_t* sf);
void block_quantize_f32_avx2(const float* x, int64_t k, BlockFormat f, float g, float inv_g,
                             uint8_t* data, uint8_t* sf);
void block_quantize_bf16_avx2(const uint16_t* x, int64_t k, BlockFormat f, float g, float inv_g,
                              uint8_t* data, uint8_t* sf);
void block_quantize_f32_avx512(const float* x, int64_t k, BlockFormat f, float g, float inv_g,
                               uint8_t* data, uint8_t* sf);
void block_quantize_bf16_avx512(const uint16_t* x, int64_t k, BlockFormat f, float g, float inv_g,
                                uint8_t* data, uint8_t* sf);

// One contiguous row x [n] -> codes[i] = e4m3(x_i / s); returns the token scale s
// (recipe::fp8_token_scale of the row's NaN-ignoring amax).
using TokenQuantizeF32 = float (*)(const float* x, int64_t n, ScaleMode mode, uint8_t* codes);
using TokenQuantizeBf16 = float (*)(const uint16_t* x, int64_t n, ScaleMode mode, uint8_t* codes);
float token_quantize_f32_avx2(const float* x, int64_t n, ScaleMode mode, uint8_t* codes);
float token_quantize_bf16_avx2(const uint16_t* x, int64_t n, ScaleMode mode, uint8_t* codes);
float token_quantize_f32_avx512(const float* x, int64_t n, ScaleMode mode, uint8_t* codes);
float token_quantize_bf16_avx512(const uint16_t* x, int64_t n, ScaleMode mode, uint8_t* codes);

}  // namespace quantkv::cpu
