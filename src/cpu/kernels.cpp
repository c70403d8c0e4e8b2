// The CPU kernel table: the one place that names ISA-specific kernels (see kernels.hpp).
#include "cpu/kernels.hpp"

namespace quantkv::cpu {
namespace {

KernelTable scalar_table() {
  KernelTable t;
  t.level = IsaLevel::kScalar;
  t.convert = {convert_e4m3_to_bf16_scalar, convert_e4m3_to_f32_scalar,
               convert_e2m1_to_doubled_int8_scalar};
  t.quantize = {};  // the drivers' scalar recipes
  t.indexer = {indexer_score_tile_scalar, filter_at_least_scalar};
  t.qkv = {qkv_fp4_pair_scalar, qkv_mxfp8_pair_scalar, qkv_fp4_bf16_pair_scalar, nullptr, nullptr};
  t.rotation = {rope_row_scalar, hadamard_row_scalar, round_bf16_row_scalar};
  t.sparse_mla = {sparse_mla_score_scalar, sparse_mla_pv_scalar};
  t.math = {moe_activation_span_scalar, exp_diff_scalar};
  return t;
}

#if defined(QUANTKV_X86_KERNELS)
KernelTable avx2_table() {
  KernelTable t = scalar_table();
  t.level = IsaLevel::kAvx2;
  t.convert = {convert_e4m3_to_bf16_avx2, convert_e4m3_to_f32_avx2,
               convert_e2m1_to_doubled_int8_avx2};
  t.quantize = {block_quantize_f32_avx2, block_quantize_bf16_avx2, token_quantize_f32_avx2,
                token_quantize_bf16_avx2};
  t.indexer.score_tile = indexer_score_tile_avx2;  // top-k's filter: the scalar one
  t.qkv.fp4_pair = qkv_fp4_pair_avx2;
  t.qkv.mxfp8_pair = qkv_mxfp8_pair_avx2;
  t.qkv.fp4_bf16_pair = qkv_fp4_bf16_pair_avx2;
  t.rotation = {rope_row_avx2, hadamard_row_avx2, round_bf16_row_avx2};
  t.sparse_mla = {sparse_mla_score_avx2, sparse_mla_pv_avx2};
  t.math = {moe_activation_span_avx2, exp_diff_avx2};
  return t;
}

// The avx512 level is AVX-512 F/BW/VL/DQ/VNNI: the int8 (vpdpbusd) GEMM, the quantisers,
// converts, rotations and top-k's filter. The kernels built on vdpbf16ps (the indexer's score
// tile, the MXFP8 and weight-only fp4 pair kernels: the *_avx512bf16.cpp files) join only
// where the CPU has AVX512_BF16 (Sapphire Rapids, Zen 4 and later); without it (Ice Lake and
// Cascade Lake servers: AVX-512 VNNI without BF16) those entries stay the AVX2 ones.
KernelTable avx512_table() {
  KernelTable t = avx2_table();
  t.level = IsaLevel::kAvx512;
  t.convert = {convert_e4m3_to_bf16_avx512, convert_e4m3_to_f32_avx512,
               convert_e2m1_to_doubled_int8_avx512};
  t.quantize = {block_quantize_f32_avx512, block_quantize_bf16_avx512, token_quantize_f32_avx512,
                token_quantize_bf16_avx512};
  t.indexer.filter_at_least = filter_at_least_avx512;
  t.qkv.fp4_pair = qkv_fp4_pair_avx512;
  // The bf16-order modes replay the order with two fma per pair (bitwise the scalar kernel's);
  // vdpbf16ps replaces them below where the CPU has it and rounds in that order.
  t.qkv.mxfp8_pair = qkv_mxfp8_pair_avx512;
  t.qkv.fp4_bf16_pair = qkv_fp4_bf16_pair_avx512;
  t.qkv.repack_fp4_half = repack_fp4_half_avx512;
  t.qkv.repack_mxfp8_half = repack_mxfp8_half_avx512;
  t.rotation = {rope_row_avx512, hadamard_row_avx512, round_bf16_row_avx512};
  t.sparse_mla = {sparse_mla_score_avx512, sparse_mla_pv_avx512};
  t.math = {moe_activation_span_avx512, exp_diff_avx512};
  if (cpu_features().avx512bf16) {
    t.indexer.score_tile = cpu_features().avx512vbmi ? indexer_score_tile_avx512bf16_vbmi
                                                     : indexer_score_tile_avx512bf16;
    // The bf16 dot product's internal order is the CPU's; keep bit-identical results on a CPU
    // that rounds differently by keeping the fma replay above. The
    // probe executes vdpbf16ps: only here, behind the BF16 check.
    if (mxfp8_avx512bf16_matches_canonical_order()) {
      t.qkv.mxfp8_pair = qkv_mxfp8_pair_avx512bf16;
      t.qkv.fp4_bf16_pair = qkv_fp4_bf16_pair_avx512bf16;  // the same instruction, the same order
    }
  }
  return t;
}
#endif

#if defined(QUANTKV_AARCH64_KERNELS)
// docs/aarch64.md: which instruction each level adds, and why each gives the scalar bits.
KernelTable neon_table() {
  KernelTable t = scalar_table();
  t.level = IsaLevel::kNeon;
  t.indexer.score_tile = indexer_score_tile_neon;
  t.qkv.fp4_pair = qkv_fp4_pair_neon;
  t.qkv.mxfp8_pair = qkv_mxfp8_pair_neon;
  t.qkv.fp4_bf16_pair = qkv_fp4_bf16_pair_neon;
  t.sparse_mla = {sparse_mla_score_neon, sparse_mla_pv_neon};
  return t;
}

KernelTable neon_dotprod_table() {
  KernelTable t = neon_table();
  t.level = IsaLevel::kNeonDotprod;
  t.qkv.fp4_pair = qkv_fp4_pair_neon_dotprod;  // SDOT
  return t;
}

KernelTable neon_bf16_table() {
  KernelTable t = neon_dotprod_table();
  t.level = IsaLevel::kNeonBf16;
  t.indexer.score_tile = indexer_score_tile_neon_bf16;  // BFMLALT + BFMLALB
  t.qkv.mxfp8_pair = qkv_mxfp8_pair_neon_bf16;
  t.qkv.fp4_bf16_pair = qkv_fp4_bf16_pair_neon_bf16;
  return t;
}
#endif

// The table of `level`, built on its first use (function-local statics: thread-safe), so the
// AVX-512 BF16 order probe runs only on a CPU that has the avx512 level (and BF16). Only for a
// supported level: the tables of the other architecture are not compiled in.
const KernelTable& table_of_supported(IsaLevel level) {
  switch (level) {
#if defined(QUANTKV_X86_KERNELS)
    case IsaLevel::kAvx512: {
      static const KernelTable t = avx512_table();
      return t;
    }
    case IsaLevel::kAvx2: {
      static const KernelTable t = avx2_table();
      return t;
    }
#endif
#if defined(QUANTKV_AARCH64_KERNELS)
    case IsaLevel::kNeonBf16: {
      static const KernelTable t = neon_bf16_table();
      return t;
    }
    case IsaLevel::kNeonDotprod: {
      static const KernelTable t = neon_dotprod_table();
      return t;
    }
    case IsaLevel::kNeon: {
      static const KernelTable t = neon_table();
      return t;
    }
#endif
    default:
      break;
  }
  static const KernelTable t = scalar_table();
  return t;
}

}  // namespace

const KernelTable& kernels_for(IsaLevel level) {
  return table_of_supported(isa_level_supported(level) ? level : max_supported_isa());
}

}  // namespace quantkv::cpu
