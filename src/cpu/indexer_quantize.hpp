// Internal: the per-token (K store) and per-(token, head) (Q prepare) fp8 quantisation of
// contract §5, shared by src/ops/indexer_k_store.cpp and src/ops/indexer_q_prepare.cpp.
#pragma once

#include <cstdint>

#include "core/recipes.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::cpu {

// Quantises n values read through load(i) with the shared recipe (recipes.hpp, also run by
// the AVX2 / AVX-512 row kernels and the CUDA K store): returns the token scale s and writes
// codes[i] = e4m3(x_i / s). NaN inputs are ignored by amax and become e4m3 NaN.
template <typename Load>
float quantize_row(Load load, int64_t n, ScaleMode mode, uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = recipe::amax_update(amax, load(i));
  const float s = recipe::fp8_token_scale(amax, mode == ScaleMode::kPowerOfTwo);
  for (int64_t i = 0; i < n; ++i) codes[i] = recipe::fp8_token_quantize_value(load(i), s);
  return s;
}

}  // namespace quantkv::cpu
