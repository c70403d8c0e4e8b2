// Internal: the fused experts' activation on a span of values (src/cpu/moe_driver.cpp):
// h[i] = quantkv::moe_activation(act, gate[i], up[i], alpha, limit) for i < n. Every ISA variant
// runs the scalar function's IEEE fp32 steps on every lane (its exp is quantkv::detail::moe_exp,
// a fixed polynomial, not the C library's), each rounded on its own (these files are compiled
// with -ffp-contract=off), so all agree bit for bit.
#pragma once

#include <cstdint>

#include "quantkv/moe.hpp"

namespace quantkv::cpu {

using MoeActivationSpanFn = void (*)(MoeActivation act, const float* gate, const float* up,
                                     int64_t n, float alpha, float limit, float* h);

// The kernel table's entry (src/cpu/kernels.hpp: kernels().moe).
struct MoeKernels {
  MoeActivationSpanFn activation = nullptr;
};

void moe_activation_span_scalar(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h);
void moe_activation_span_avx2(MoeActivation act, const float* gate, const float* up, int64_t n,
                              float alpha, float limit, float* h);
void moe_activation_span_avx512(MoeActivation act, const float* gate, const float* up, int64_t n,
                                float alpha, float limit, float* h);

}  // namespace quantkv::cpu
