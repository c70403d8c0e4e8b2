// Internal: the CPU loops of the fused experts (quantkv/moe.hpp): the routes bucketed by expert,
// then per batch of experts (all of them in decode) the gathered rows through the GEMM core
// (src/cpu/gemm_driver.hpp: run_gemm_batch, one parallel region over every routed expert's
// column pairs) twice with the activation between, then the combine per token in slot order;
// in token chunks when the routes' rows exceed ctx.experts_budget_bytes.
// src/ops/moe.cpp validates.
#pragma once

#include "quantkv/context.hpp"
#include "quantkv/moe.hpp"
#include "quantkv/status.hpp"

namespace quantkv::cpu {

// Runs a validated call (shapes, the prepared experts and the aliasing checked). Allocates
// everything before y is written: a failure leaves y untouched.
Status run_fused_experts(const FusedExpertsArgs& args, const Context& ctx);

}  // namespace quantkv::cpu
