// Internal: the CPU driver of the block-scaled GEMM core (contract §4), shared by every entry
// point that multiplies by a prepared weight: the fused QKV (paged-cache epilogue), the plain
// linear layer (row epilogue) and the fused experts (row epilogue into fp32 scratch rows, then
// their own combine: src/cpu/moe_driver.cpp). The operators in
// src/ops/ validate, take their snapshots and choose the epilogue; everything that loops over
// data lives here and in the per-ISA pair kernels (qkv_kernels.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/gemm_epilogue.hpp"
#include "quantkv/context.hpp"
#include "quantkv/linear.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv::cpu {

// The activations of one call in the kernels' form (QkvActivations in qkv_kernels.hpp).
struct GemmActivations {
  std::vector<uint32_t> units;
  std::vector<int32_t> corr;
  std::vector<float> scale;
  int groups = 0;
  bool bf16 = false;  // bf16 units (weight-only): the weight's bf16 kernels run
  // bf16 units: the largest biased exponent of a finite value (0 if none), which decides
  // whether a product with a weight value can overflow (run_gemm_batch).
  int max_exponent = 0;
  // bf16 units of at most kExactMaxRows rows: the exact blocks' int16 form (QkvActivations).
  std::vector<uint32_t> exact_units;
  std::vector<float> exact_scale;
};

// Quantised activations x [M, row_bytes(K)] with their 5-D swizzled block scales (validated).
void prepare_block_activations(TensorView<const uint8_t, 2> x, TensorView<const uint8_t, 5> x_scale,
                               BlockFormat format, int64_t k, const Context& ctx,
                               GemmActivations* a);
// bf16 activations [M, K] for a weight of block size sfv (weight-only).
void prepare_bf16_activations(TensorView<const bfloat16, 2> x, int sfv, const Context& ctx,
                              GemmActivations* a);

// c = x . W^T of m rows on a prepared weight, each finished tile handed to `epi`. Allocates its
// scratch before anything is written (kResourceExhausted leaves the outputs untouched).
Status run_gemm(int64_t m, const GemmActivations& a, const PreparedWeights& w, GemmEpilogue epi,
                const Context& ctx);

// One GEMM of a batch: m rows of `a` times the prepared weight `w`, finished tiles to `epi`.
struct GemmJob {
  int64_t m = 0;
  const GemmActivations* a = nullptr;
  const PreparedWeights* w = nullptr;
  GemmEpilogue epi;
};
// Every job's 32-column pairs in one parallel region (the fused experts' routed experts at
// once): each pair is computed whole by one thread with the kernel run_gemm would use, so the
// bits equal those of run_gemm per job whatever the thread count. Same allocation contract.
Status run_gemm_batch(const std::vector<GemmJob>& jobs, const Context& ctx);

// Where a weight's block scales come from: the 5-D swizzled tensor of contract §4, or the
// row-major [N, K / SFV] of checkpoints (`row_stride` codes per row).
struct WeightScaleSource {
  const uint8_t* data = nullptr;
  bool swizzled = true;
  int64_t row_stride = 0;  // row-major only
};

// Packs a validated weight [n, row_bytes(k)] and its scales into `out` (reusing its buffers).
Status pack_weights(TensorView<const uint8_t, 2> weight, WeightScaleSource scale,
                    BlockFormat format, int64_t k, PreparedWeights* out, const Context& ctx);

// Whether `w` holds a packed weight consistent with its sizes.
bool is_prepared(const PreparedWeights& w);

}  // namespace quantkv::cpu
