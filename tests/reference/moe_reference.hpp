// Scalar reference of the fused experts (quantkv/moe.hpp): the test oracle. It loops over the
// experts as gpt-oss's and vLLM's torch references do, runs each routed row through the linear
// reference (linear_reference.hpp: the canonical order) twice with quantkv::moe_activation
// between, keeps every route's output and then combines each token's slots in slot order,
// acc = acc + w * o, rounded in fp32 at every step (this file is compiled without contraction).
// In the quantised modes each routed row is quantised on its own by the library's
// quantize_dynamic_block_scaled (a tested operation) with the expert's global scale.
#pragma once

#include <cstdint>

#include "quantkv/moe.hpp"

namespace quantkv::reference {

struct MoeReferenceArgs {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t t = 0, k = 0, experts = 0, hidden = 0, inter = 0;
  const uint16_t* x = nullptr;          // [T, H] bf16 bits
  const int32_t* topk_ids = nullptr;    // [T, k]
  const float* topk_weights = nullptr;  // [T, k]
  // Stacked weights, contiguous: codes and row-major scales.
  const uint8_t* w13 = nullptr;        // [E, 2I, row_bytes(H)]
  const uint8_t* w13_scale = nullptr;  // [E, 2I, H / SFV]
  const uint8_t* w2 = nullptr;         // [E, H, row_bytes(I)]
  const uint8_t* w2_scale = nullptr;   // [E, H, I / SFV]
  const float* w13_alpha = nullptr;    // [E]
  const float* w2_alpha = nullptr;     // [E]
  const float* w3_alpha = nullptr;     // [E] up's factor, or null (w13_alpha's)
  const float* x_global = nullptr;     // [E]
  const float* h_global = nullptr;     // [E]
  int64_t expert_offset = 0;
  bool quantize_activations = false;
  GateUpLayout gate_up = GateUpLayout::kHalves;
  MoeActivation activation = MoeActivation::kSiluGated;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
  const float* w13_bias = nullptr;  // [E, 2I] or null
  const float* w2_bias = nullptr;   // [E, H] or null
  uint16_t* y = nullptr;            // [T, H] bf16, or
  float* y_f32 = nullptr;           // [T, H] fp32
};
void moe_reference(const MoeReferenceArgs& a);

}  // namespace quantkv::reference
