// The fused mixture-of-experts layer (issue #28): for every token, its top-k experts' gated MLPs
// on block-scaled weights (NVFP4, MXFP4, MXFP8), combined with the router's weights, on the GEMM
// core of the linear layer (quantkv/linear.hpp; same canonical order, same prepared weights).
// Semantics, evaluation order and what is not done yet: docs/moe.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/fp32_math.hpp"
#include "quantkv/linear.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// ------------------------------------------------------------------ prepared experts
// E experts of one layer, each a gated MLP: w13 [2I, H] (gate and up stacked) and w2 [H, I].
struct PreparedExperts {
  std::vector<PreparedWeights> w13, w2;
  // Per expert: the weight's own factor (1 / g_w for NVFP4, 1 for MX formats). w13_alpha is
  // gate's (w1) and up's (w3) unless w3_alpha is given: [E] up's own factor, where a checkpoint
  // quantised gate and up with different global scales; empty: w13_alpha for both halves.
  std::vector<float> w13_alpha, w2_alpha, w3_alpha;
  // Per expert: the NVFP4 activation quantiser's global scales of the W4A4 mode (x before w13,
  // the intermediate h before w2); 1 for MX formats.
  std::vector<float> x_global, h_global;
  int64_t num_experts() const { return int64_t(w13.size()); }
  int64_t hidden() const { return w13.empty() ? 0 : w13[0].k; }      // H
  int64_t intermediate() const { return w2.empty() ? 0 : w2[0].k; }  // I
};

// The experts as checkpoints stack them: codes and row-major block scales (as in WeightSource's
// scale_rows) with the expert as the leading dimension. The factors are optional ([E], or empty
// for 1 each).
struct ExpertsSource {
  TensorView<const uint8_t, 3> w13;        // [E, 2I, row_bytes(H)]
  TensorView<const uint8_t, 3> w13_scale;  // [E, 2I, H / SF_VECTOR_SIZE]
  TensorView<const uint8_t, 3> w2;         // [E, H, row_bytes(I)]
  TensorView<const uint8_t, 3> w2_scale;   // [E, H, I / SF_VECTOR_SIZE]
  BlockFormat format = BlockFormat::kNVFP4;
  TensorView<const float, 1> w13_alpha, w2_alpha;  // [E] finite, or empty (1)
  TensorView<const float, 1> w3_alpha;            // [E] finite: up's factor, or empty (w13_alpha's)
  TensorView<const float, 1> x_global, h_global;  // [E] finite > 0 (NVFP4; 1 for MX), or empty
};
// Packs every expert into `out` (replacing its contents; a failure leaves it empty).
Status prepare_experts(const ExpertsSource& source, PreparedExperts* out, const Context& ctx);

// ------------------------------------------------------------------ the fused experts
enum class GateUpLayout : int {
  kHalves = 0,       // w13 rows [0, I) gate, [I, 2I) up
  kInterleaved = 1,  // gate and up alternate row by row (gpt-oss): row 2i gate i, 2i + 1 up i
};

enum class MoeActivation : int {
  kSiluGated = 0,  // silu(gate) * up
  kSwigluOai = 1,  // gpt-oss: (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g),
                   // g = min(gate, limit)
};

namespace detail {
// NaN as the one quiet NaN (0x7FC00000): which operand's NaN an IEEE step passes on is the
// compiler's choice (it may swap a product's operands), so a NaN activation is made canonical.
inline float moe_canonical_nan(float h) {
  return h != h ? std::numeric_limits<float>::quiet_NaN() : h;
}
}  // namespace detail

// The activation of one (gate, up) pair, in fp32 with detail::exp_f32 in exactly this order (the
// library and the tests' reference both call it):
//   kSiluGated: h = (gate / (1 + exp(-gate))) * up
//   kSwigluOai: g = gate > limit ? limit : gate;  u = up < -limit ? -limit : (up > limit ? limit
//               : up);  s = 1 / (1 + exp(-(alpha * g)));  h = (g * s) * (u + 1)
// (NaN passes through both clamps; a NaN h is the canonical quiet NaN.) The translation units that
// call it are compiled without floating-point contraction.
inline float moe_activation(MoeActivation act, float gate, float up, float alpha, float limit) {
  if (act == MoeActivation::kSiluGated) {
    const float den = 1.0f + detail::exp_f32(-gate);
    const float silu = gate / den;
    return detail::moe_canonical_nan(silu * up);
  }
  const float g = gate > limit ? limit : gate;
  const float u = up < -limit ? -limit : (up > limit ? limit : up);
  const float z = alpha * g;
  const float den = 1.0f + detail::exp_f32(-z);
  const float s = 1.0f / den;
  const float glu = g * s;
  const float u1 = u + 1.0f;
  return detail::moe_canonical_nan(glu * u1);
}

// y[t] = sum over the slots j of token t, in slot order, of topk_weights[t, j] * expert_e(x[t]),
// e = topk_ids[t, j] - expert_offset, over the routes whose e lies in [0, E) (the rest are
// skipped: expert parallelism, the caller sums the ranks' outputs; a token without any route
// gets 0). expert_e(x) = w2 . act(w13 . x * f13 + b13) * f2 + b2 with the GEMM core's canonical
// order; docs/moe.md gives every rounding. Bitwise identical across ISA paths and thread counts.
struct FusedExpertsArgs {
  TensorView<const bfloat16, 2> x;           // [T, H]
  TensorView<const int32_t, 2> topk_ids;     // [T, k]
  TensorView<const float, 2> topk_weights;   // [T, k]
  const PreparedExperts* experts = nullptr;  // E local experts
  int64_t expert_offset = 0;  // ids outside [expert_offset, expert_offset + E) are skipped
  // W4A4 (NVFP4 / MXFP4) or W8A8 (MXFP8): x and h quantised per routed row with the expert's
  // x_global / h_global by quantize_dynamic_block_scaled; false: weight-only, bf16 x and h.
  bool quantize_activations = false;
  GateUpLayout gate_up = GateUpLayout::kHalves;
  MoeActivation activation = MoeActivation::kSiluGated;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
  TensorView<const float, 2> w13_bias;  // [E, 2I] fp32, optional
  TensorView<const float, 2> w2_bias;   // [E, H] fp32, optional
  TensorView<bfloat16, 2> y;            // [T, H] bf16, or
  TensorView<float, 2> y_f32;           // [T, H] fp32 (exactly one of the two)
};
Status fused_experts(const FusedExpertsArgs& args, const Context& ctx);

}  // namespace quantkv
