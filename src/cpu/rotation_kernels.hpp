// Internal: the rotations shared by fused_qk_rope_ragged (src/ops/rope.cpp) and the indexer
// front end of indexer_q_prepare / indexer_k_store (src/ops/indexer_front_end.cpp): RoPE on a
// float row, the Walsh-Hadamard transform, and rounding a row to bf16. Every ISA variant runs
// the scalar variant's IEEE fp32 operations on every element (products rounded separately,
// never fused: these files are compiled with -ffp-contract=off), so all agree bit for bit.
#pragma once

#include <cstdint>

#include "quantkv/rope.hpp"

namespace quantkv::cpu {

// Rotates x [rope_dim] in place with cs [rope_dim] = (cos_0, sin_0, cos_1, sin_1, ...):
// pair i is (x[2i], x[2i+1]) (interleaved) or (x[i], x[i + rope_dim/2]) (half-split), and
//   (a, b) -> (fl(fl(a*cos_i) - fl(b*sin_i)), fl(fl(a*sin_i) + fl(b*cos_i))).
using RopeRowFn = void (*)(float* x, const float* cs, int64_t rope_dim, RopeLayout layout);
// x [n] (n a power of two) -> fl(H_n x * scale), H_n the unnormalised Walsh-Hadamard matrix,
// by radix-2 butterflies h = 1, 2, 4, ..., n/2 ((a, b) -> (a + b, a - b)), then one multiply.
using HadamardRowFn = void (*)(float* x, int64_t n, float scale);
// x [n] -> bf16(x) as float (round to nearest even; NaN stays NaN), in place.
using RoundBf16RowFn = void (*)(float* x, int64_t n);

// The kernel table's entry (src/cpu/kernels.hpp: kernels().rotation).
struct RotationKernels {
  RopeRowFn rope = nullptr;
  HadamardRowFn hadamard = nullptr;
  RoundBf16RowFn round_bf16 = nullptr;
};

void rope_row_scalar(float* x, const float* cs, int64_t rope_dim, RopeLayout layout);
void hadamard_row_scalar(float* x, int64_t n, float scale);
void round_bf16_row_scalar(float* x, int64_t n);
void rope_row_avx2(float* x, const float* cs, int64_t rope_dim, RopeLayout layout);
void hadamard_row_avx2(float* x, int64_t n, float scale);
void round_bf16_row_avx2(float* x, int64_t n);
void rope_row_avx512(float* x, const float* cs, int64_t rope_dim, RopeLayout layout);
void hadamard_row_avx512(float* x, int64_t n, float scale);
void round_bf16_row_avx512(float* x, int64_t n);

// Scalar steps the vector variants use for their tails (same operations as the scalar rows).
static inline void rope_pair(float* a, float* b, float c, float s) {
  const float x0 = *a, x1 = *b;
  *a = x0 * c - x1 * s;
  *b = x0 * s + x1 * c;
}
void rope_pairs_scalar(float* x, const float* cs, int64_t begin, int64_t end, int64_t rope_dim,
                       RopeLayout layout);
void butterfly_stage_scalar(float* x, int64_t n, int64_t h);

}  // namespace quantkv::cpu
