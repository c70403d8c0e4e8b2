// Internal: the CPU backend's kernel table. One struct of function pointers per operator
// family, filled once per ISA level (src/cpu/kernels.cpp); drivers call kernels() per call and
// hold no ISA code (the XNNPACK pattern: one config per operator, drivers ISA-free).
//
// Conventions:
//  - kernels() reads the active level (active_isa(): QUANTKV_ISA, set_isa_level()) on every
//    call, so a forced level takes effect at once. The table of a level is built on its first
//    use, and only for a level this CPU supports (set_isa_level refuses the others).
//  - A level without its own variant of a kernel inherits the next slower level's entry.
//  - Where a family has no scalar microkernel (the driver's own scalar loop is the fallback and
//    the reference), the scalar entry is null; drivers test for null.
//  - Only the levels of the architecture built for exist (QUANTKV_X86_KERNELS: avx2, avx512;
//    QUANTKV_AARCH64_KERNELS: neon, neon-dotprod, neon-bf16); any other level gets the best
//    supported level's table, the scalar one when no kernels are built.
#pragma once

#include "cpu/convert_kernels.hpp"
#include "cpu/fp32_math_kernels.hpp"
#include "cpu/indexer_kernels.hpp"
#include "cpu/qkv_kernels.hpp"
#include "cpu/quantize_kernels.hpp"
#include "cpu/rotation_kernels.hpp"
#include "cpu/sparse_mla_kernels.hpp"
#include "cpu/topk.hpp"
#include "quantkv/cpu_features.hpp"

namespace quantkv::cpu {

// Bulk row conversions (quantkv/formats.hpp's convert_*). Never null.
struct ConvertKernels {
  void (*e4m3_to_bf16)(const uint8_t* src, uint16_t* dst, int64_t n) = nullptr;
  void (*e4m3_to_f32)(const uint8_t* src, float* dst, int64_t n) = nullptr;
  void (*e2m1_to_doubled_int8)(const uint8_t* packed, int8_t* dst, int64_t n) = nullptr;
};

// Row quantisers of src/ops/quantize.cpp, indexer_k_store.cpp, indexer_q_prepare.cpp.
// Null: the driver's scalar recipe runs.
struct QuantizeKernels {
  BlockQuantizeF32 block_f32 = nullptr;
  BlockQuantizeBf16 block_bf16 = nullptr;
  TokenQuantizeF32 token_f32 = nullptr;
  TokenQuantizeBf16 token_bf16 = nullptr;
};

// The lightning indexer: the score tile (never null) and top-k's pre-filter (never null).
struct IndexerKernels {
  IndexerTileFn score_tile = nullptr;
  FilterFn filter_at_least = nullptr;
};

// The fused QKV projection: pair kernels (never null) and the weight packer's vector repack
// (null: prepare_qkv_weights' scalar loop packs everything).
struct QkvKernels {
  QkvPairKernel fp4_pair = nullptr;
  QkvPairKernel mxfp8_pair = nullptr;
  QkvPairKernel fp4_bf16_pair = nullptr;  // weight-only: bf16 activations, fp4 weight
  RepackHalf repack_fp4_half = nullptr;
  RepackHalf repack_mxfp8_half = nullptr;
};

struct KernelTable {
  IsaLevel level = IsaLevel::kScalar;
  ConvertKernels convert;
  QuantizeKernels quantize;
  IndexerKernels indexer;
  QkvKernels qkv;
  RotationKernels rotation;     // RoPE, Walsh-Hadamard, bf16 rounding rows (never null)
  SparseMlaKernels sparse_mla;  // score and PV kernels of sparse MLA attention (never null)
  Fp32MathKernels math;         // elementwise fp32 math: MoE activation, exp (never null)
};

// The table of a level this CPU supports (for a level it does not, the best supported one's).
const KernelTable& kernels_for(IsaLevel level);
// The table of the active level.
inline const KernelTable& kernels() { return kernels_for(active_isa()); }

}  // namespace quantkv::cpu
