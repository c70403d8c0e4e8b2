// Internal: elementwise fp32 math on spans of values, built on quantkv::detail::exp_f32
// (quantkv/fp32_math.hpp: a fixed polynomial, not the C library's exp):
//   moe_activation  the fused experts' activation (src/cpu/moe_driver.cpp):
//                   h[i] = quantkv::moe_activation(act, gate[i], up[i], alpha, limit), i < n;
//   exp_diff        sparse MLA's softmax numerators (src/cpu/sparse_mla_driver.cpp):
//                   p[i] = exp_f32(s[i] - m[i]), i < n.
// Every ISA variant runs the scalar functions' IEEE fp32 steps on every lane, each rounded on its
// own (these files are compiled with -ffp-contract=off), so all agree bit for bit.
#pragma once

#include <cstdint>

#include "quantkv/fp32_math.hpp"
#include "quantkv/moe.hpp"

namespace quantkv::cpu {

using MoeActivationSpanFn = void (*)(MoeActivation act, const float* gate, const float* up,
                                     int64_t n, float alpha, float limit, float* h);
using ExpDiffFn = void (*)(const float* s, const float* m, int64_t n, float* p);

// The kernel table's entry (src/cpu/kernels.hpp: kernels().math).
struct Fp32MathKernels {
  MoeActivationSpanFn moe_activation = nullptr;
  ExpDiffFn exp_diff = nullptr;
};

void moe_activation_span_scalar(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h);
void moe_activation_span_avx2(MoeActivation act, const float* gate, const float* up, int64_t n,
                              float alpha, float limit, float* h);
void moe_activation_span_avx512(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h);
void exp_diff_scalar(const float* s, const float* m, int64_t n, float* p);
void exp_diff_avx2(const float* s, const float* m, int64_t n, float* p);
void exp_diff_avx512(const float* s, const float* m, int64_t n, float* p);

}  // namespace quantkv::cpu
