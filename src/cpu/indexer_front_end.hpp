// Internal: one row of the indexer front end (RoPE -> [bf16] -> Hadamard -> [bf16] -> e4m3 with
// a per-row scale), shared by the K store and the Q prepare. The caller validated the options.
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu/indexer_quantize.hpp"
#include "cpu/kernels.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::cpu {

struct FrontEndPlan {
  RotationKernels kernels;
  TokenQuantizeF32 quantize = nullptr;  // null: the scalar quantize_row
  bool rope = false;
  int64_t rope_dim = 0, rope_offset = 0;
  RopeLayout layout = RopeLayout::kInterleaved;
  bool hadamard = false;
  float hadamard_scale = 1.0f;  // fl(D^-0.5), as the reference's float(hidden_size ** -0.5)
  bool round_bf16 = false;
};

inline FrontEndPlan make_front_end_plan(const IndexerFrontEnd& fe, int64_t D) {
  FrontEndPlan p;
  p.kernels = kernels().rotation;
  p.quantize = kernels().quantize.token_f32;
  p.rope = fe.apply_rope;
  if (p.rope) {
    p.rope_dim = fe.rope.freqs_cis.shape[1];
    p.rope_offset = fe.rope.placement == RopePlacement::kLeading ? 0 : D - p.rope_dim;
    p.layout = fe.rope.layout;
  }
  p.hadamard = fe.hadamard == HadamardMode::kWalshHadamard;
  p.hadamard_scale = float(std::pow(double(D), -0.5));
  p.round_bf16 = fe.rounding == FrontEndRounding::kBf16Steps;
  return p;
}

// x [D] (the loaded row) rotated in place: RoPE -> [bf16] -> Hadamard -> [bf16]. `cs` is the
// row's cos/sin table row (unused without RoPE).
inline void front_end_rotate_row(const FrontEndPlan& p, float* x, int64_t D, const float* cs) {
  if (p.rope) {
    p.kernels.rope(x + p.rope_offset, cs, p.rope_dim, p.layout);
    if (p.round_bf16) p.kernels.round_bf16(x, D);
  }
  if (p.hadamard) {
    p.kernels.hadamard(x, D, p.hadamard_scale);
    if (p.round_bf16) p.kernels.round_bf16(x, D);
  }
}

// x [D] (the loaded row, overwritten) -> codes [D]; returns the row's scale.
inline float front_end_quantize_row(const FrontEndPlan& p, float* x, int64_t D, const float* cs,
                                    ScaleMode mode, uint8_t* codes) {
  front_end_rotate_row(p, x, D, cs);
  if (p.quantize != nullptr) return p.quantize(x, D, mode, codes);
  return quantize_row([&](int64_t i) { return x[i]; }, D, mode, codes);
}

}  // namespace quantkv::cpu
