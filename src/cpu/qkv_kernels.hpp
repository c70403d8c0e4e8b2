// Internal: the per-ISA kernels of the fused QKV projection (contract §4) and the data they share.
//
// The work unit is a "pair": 32 output columns (two 16-lane halves) over all M rows. A kernel
// decodes the pair's prepared weight into a panel (L2-resident scratch), runs register tiles of
// rows over it and hands each finished fp32 tile to the epilogue. Every (m, n) is computed by
// one kernel call in the canonical order below, so results do not depend on the thread count
// and every ISA path gives the same bits.
//
// Canonical fp32 order for output (m, n), with s_kb = fl(sa'(m, kb) * sb(n, kb)):
//   fp4 (NVFP4, MXFP4): sa' = |sa| * 0.25 (the doubled codes carry a factor 4),
//     acc = 0; for kb ascending: acc = fma(float(idot_kb), s_kb, acc)
//     where idot_kb is the exact integer dot product of the doubled e2m1 codes of the block.
//   MXFP8: sa' = |sa|, t_kb = 0; for p = 0..15: t = t + a[2p+1] b[2p+1]; t = t + a[2p] b[2p]
//     (each product exact, each sum rounded: the lane order of vdpbf16ps, checked on this
//     CPU); acc = fma(t_kb, s_kb, acc).
//   bf16 weight-only (docs/checkpoints.md): the MXFP8 order with a = the bf16 activations
//     (|a| < 2^-110 taken as 0, so no product or partial sum is subnormal), sa' = 1, b = the
//     weight's e2m1 or e4m3 values as bf16 and SFV/2 pairs per block (8 for NVFP4). A product
//     that overflows is rounded to +-Inf before its add (opposite ones sum to NaN), which an
//     fma would not do: calls with such activations (|a| >= 2^125 for e2m1 weights, 2^119 for
//     e4m3) run the scalar kernels (run_gemm_batch).
//   c = acc * section_sf (q, k or v by column).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/gemm_epilogue.hpp"
#include "cpu/static_count.hpp"
#include "quantkv/qkv_fp4.hpp"

namespace quantkv::cpu {

inline constexpr int kPairCols = 32;  // columns per work unit
inline constexpr int kHalfCols = 16;  // columns per 512-bit vector of int32 / fp32 lanes
inline constexpr int kFp4Bias = 12;   // doubled e2m1 codes + 12 are unsigned bytes in [0, 24]

// How far ahead (in blocks of the pair) the decode-sized kernels prefetch the weight they
// stream from memory, into L2: about 12 KB for NVFP4. Measured on Zen 4 (M = 1, K = 8192):
// L1 prefetches or 2 KB ahead leave one thread at half the read bandwidth.
inline constexpr int kDirectPrefetchBlocks = 48;
// The w4a4 decode-sized kernels also prefetch every line kDirectL1Blocks blocks ahead into L1,
// within the pair (DirectPrefetch::near). Measured on a Xeon model 207 VM (2.3 GHz, three
// alternating runs): AVX-512 MoE decode 8-15% faster (gpt-oss T = 1, 2 threads, 2.78-2.93 ->
// 2.55-2.59 ms; Qwen3 T = 16, 1 thread, 22.8-23.3 -> 19.7-20.0 ms), QKV NVFP4 Llama-3-8B M = 1
// 0.70-0.72 -> 0.58-0.61 ms; AVX2 about 5%; 2 or 4 blocks ahead were in between. Not the
// weight-only kernels (no gain or slower there), and not past the pair's end into the next
// pair (that variant was 10-15% slower than none).
inline constexpr int kDirectL1Blocks = 8;
inline constexpr int kPanelPrefetchChunks = 192;  // the same distance in 64-byte chunks

// Pairs a thread takes at once (the driver's dynamic schedule, chunks aligned at pair 0 of
// each job): a kernel may prefetch the next pair of its chunk, which the same thread computes
// next. The driver picks QkvProblem::chunk_pairs per call between these bounds: long chunks
// when there are many pairs per thread (decode: a thread streams one run of contiguous pairs,
// and few of its prefetches cross into a chunk another thread takes), short ones when there
// are few (the dynamic schedule still balances them).
inline constexpr int kMinPairsPerChunk = 2;
inline constexpr int kMaxPairsPerChunk = 8;
inline constexpr int kChunksPerThread = 8;  // at least this many chunks per thread

inline constexpr int kRowTile = 6;  // rows per activation tile (the AVX-512 register tile)

// The activations, prepared once per call in row tiles of kRowTile rows (the last tile
// padded with zero rows), so a register tile reads one contiguous run per block with
// constant offsets. A "unit" is 4 bytes: 4 doubled e2m1 codes (fp4, k = 4g..4g+3 of the
// block) or one bf16 pair (MXFP8, k = 2g, 2g+1).
//   units [tiles][Kb][groups][kRowTile]   groups = SFV/4 (fp4) or 16 (MXFP8)
//   corr  [tiles][Kb][kRowTile]           fp4: -12 * sum of the block's codes
//   scale [tiles][Kb][kRowTile]           sa' as above
struct QkvActivations {
  const uint32_t* units = nullptr;
  const int32_t* corr = nullptr;
  const float* scale = nullptr;
  int groups = 0;
  // Every block scale is 1 (bf16 activations: sa' = 1), so fl(sa * sb) = sb and a kernel may
  // skip the product (same bits).
  bool unit_scale = false;
  // bf16 units of at most kExactMaxRows rows (else null): the blocks whose values are exact
  // int16 multiples of one power of two (prepare_bf16_activations, gemm_driver.cpp) also as int16
  // pairs at the units' indices, and that power of two per (row, block) at the scale's indices (0:
  // not such a block). A kernel may sum such a block in int32 (the same t as the canonical order).
  const uint32_t* exact_units = nullptr;
  const float* exact_scale = nullptr;
};
inline constexpr int kExactMaxRows = 4;

struct QkvProblem {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t m = 0, k = 0, kb_count = 0;
  int sfv = 16;
  QkvActivations a;
  int64_t n = 0;                            // output columns (the weight's N)
  const uint8_t* w_data = nullptr;          // PreparedWeights::data (raw pointers: no std::vector
  const uint16_t* w_scales = nullptr;       // code is instantiated with ISA flags)
  GemmEpilogue epi;                         // where each finished tile goes (gemm_epilogue.hpp)
  int64_t chunk_pairs = kMinPairsPerChunk;  // pairs per chunk of the driver's schedule
};

// Small helpers with internal linkage: each ISA translation unit keeps its own copy, so a
// non-inlined AVX-512 copy can never be picked by the linker for the scalar or AVX2 kernels
// (which would fault on CPUs without AVX-512; scripts/check_isa_symbols.sh).
namespace {

// Index of (row m, block kb, group g) in QkvActivations::units, and of (m, kb) in corr/scale.
inline int64_t act_unit_index(const QkvProblem& p, int64_t m, int64_t kb, int g) {
  return (((m / kRowTile) * p.kb_count + kb) * p.a.groups + g) * kRowTile + m % kRowTile;
}
inline int64_t act_block_index(const QkvProblem& p, int64_t m, int64_t kb) {
  return ((m / kRowTile) * p.kb_count + kb) * kRowTile + m % kRowTile;
}

}  // namespace

// Bytes of a pair's decoded codes: fp4 one biased byte per value, MXFP8 one bf16 per value
// (a multiple of 64: k is a multiple of 16).
inline std::size_t qkv_panel_code_bytes(BlockFormat format, int64_t k) {
  return std::size_t(kPairCols) * std::size_t(k) * (format == BlockFormat::kMXFP8 ? 2 : 1);
}

// Scratch bytes a pair kernel needs for its decoded panel: the codes, then room for the pair's
// weight scales as fp32 (kPairCols per block of at least 16 k), which the AVX2 kernels decode
// once per pair.
inline std::size_t qkv_panel_bytes(BlockFormat format, int64_t k) {
  return qkv_panel_code_bytes(format, k) +
         std::size_t(kPairCols) * std::size_t(k / 16) * sizeof(float);
}

// Computes and stores the 32 columns of `pair` for every row. `panel` holds
// qkv_panel_bytes() bytes, 64-byte aligned.
using QkvPairKernel = void (*)(const QkvProblem& p, int64_t pair, uint8_t* panel);

void qkv_fp4_pair_scalar(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_fp4_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_fp4_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_fp4_pair_neon(const QkvProblem& p, int64_t pair, uint8_t* panel);          // aarch64
void qkv_fp4_pair_neon_dotprod(const QkvProblem& p, int64_t pair, uint8_t* panel);  // + dotprod
void qkv_mxfp8_pair_scalar(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_mxfp8_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel);
// AVX-512F without BF16 (two fma per bf16 pair; qkv_bf16_fma_avx512.cpp): MXFP8 and weight-only.
void qkv_mxfp8_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_fp4_bf16_pair_avx512(const QkvProblem& p, int64_t pair, uint8_t* panel);
// AVX-512 BF16 (vdpbf16ps; qkv_mxfp8_avx512bf16.cpp): only when cpu_features().avx512bf16.
void qkv_mxfp8_pair_avx512bf16(const QkvProblem& p, int64_t pair, uint8_t* panel);
// Weight-only (bf16 activations) on a prepared fp4 weight: the units are bf16 pairs, the
// panel is the weight's e2m1 values as bf16 in the MXFP8 panel layout with SFV/2 pairs per
// block. (An MXFP8 weight runs the MXFP8 kernels above on bf16 units.)
void qkv_fp4_bf16_pair_scalar(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_fp4_bf16_pair_avx2(const QkvProblem& p, int64_t pair, uint8_t* panel);
void qkv_fp4_bf16_pair_avx512bf16(const QkvProblem& p, int64_t pair, uint8_t* panel);  // BF16
void qkv_mxfp8_pair_neon(const QkvProblem& p, int64_t pair, uint8_t* panel);           // aarch64
void qkv_mxfp8_pair_neon_bf16(const QkvProblem& p, int64_t pair, uint8_t* panel);      // + BF16
void qkv_fp4_bf16_pair_neon(const QkvProblem& p, int64_t pair, uint8_t* panel);        // aarch64
void qkv_fp4_bf16_pair_neon_bf16(const QkvProblem& p, int64_t pair, uint8_t* panel);   // + BF16

// Repack of the data of one half (16 columns; column c's row at src + c * stride) over the
// first span_bytes (a multiple of 64) of the rows: block kb's prepared unit at
// dst + kb * unit_stride. Only AVX-512 variants: the scalar loop in prepare_qkv_weights is
// the fallback and the reference layout.
using RepackHalf = void (*)(const uint8_t* src, int64_t stride, int64_t span_bytes, int block_bytes,
                            uint8_t* dst, int64_t unit_stride);
void repack_fp4_half_avx512(const uint8_t* src, int64_t stride, int64_t span_bytes, int block_bytes,
                            uint8_t* dst, int64_t unit_stride);
void repack_mxfp8_half_avx512(const uint8_t* src, int64_t stride, int64_t span_bytes,
                              int block_bytes, uint8_t* dst, int64_t unit_stride);

// Whether this CPU's vdpbf16ps follows the canonical MXFP8 order (checked on random e4m3
// inputs; true on Intel's implementation). Call only when cpu_features().avx512bf16. When it
// is false (or the CPU has no AVX-512 BF16) the dispatcher uses the AVX2 kernel, which replays
// the order with fma.
bool mxfp8_avx512bf16_matches_canonical_order();

// ---- The prepared-weight layout (PreparedQkvWeights), defined here once: the packer
// (pack_weights, src/cpu/gemm_driver.cpp), its AVX-512 repack and the pair kernels read it.
//   data   [pair][kb][half][unit]   a unit: kHalfCols columns x one block (block_bytes each)
//   scales [pair][kb][half][kHalfCols] bf16 bits of |scale|
// Inside a unit:
//   fp4:   chunk j < SFV/8 of kFp4ChunkBytes; column c's 4 bytes at j * 64 + 4c hold k
//          8j..8j+3 in the low nibbles and k 8j+4..8j+7 in the high nibbles.
//   MXFP8: vector pv < SFV/2 of kMxfp8VectorBytes; column c's k pair (2pv, 2pv + 1) at
//          pv * 32 + 2c.
inline constexpr int kFp4ChunkBytes = kHalfCols * 4;     // 64
inline constexpr int kMxfp8VectorBytes = kHalfCols * 2;  // 32

struct PreparedLayout {
  int64_t kb_count = 0;     // K / SFV
  int64_t block_bytes = 0;  // row_bytes(format, SFV): one column's block
  PreparedLayout(BlockFormat f, int64_t k)
      : kb_count(k / sf_vector_size(f)), block_bytes(row_bytes(f, sf_vector_size(f))) {}
  int64_t unit(int64_t pair, int64_t kb, int half) const {
    return (pair * kb_count + kb) * 2 + half;
  }
  int64_t unit_bytes() const { return kHalfCols * block_bytes; }
  // Bytes from one block's unit to the next block's unit of the same half.
  int64_t kb_stride() const { return 2 * unit_bytes(); }
  int64_t data_offset(int64_t pair, int64_t kb, int half) const {
    return unit(pair, kb, half) * unit_bytes();
  }
  int64_t scale_offset(int64_t pair, int64_t kb, int half, int lane) const {
    return unit(pair, kb, half) * kHalfCols + lane;
  }
  int64_t pair_data_bytes() const { return kb_count * kb_stride(); }
  int64_t pair_scales() const { return kb_count * 2 * kHalfCols; }
};
// Byte offsets inside a unit of column `lane`'s fp4 chunk j / MXFP8 vector pv.
inline constexpr int64_t fp4_chunk_offset(int j, int lane) {
  return int64_t(j) * kFp4ChunkBytes + lane * 4;
}
inline constexpr int64_t mxfp8_vector_offset(int pv, int lane) {
  return int64_t(pv) * kMxfp8VectorBytes + lane * 2;
}

namespace {
// The prepared data / scales of one pair: [kb][half][unit] / [kb][half][kHalfCols].
inline const uint8_t* prepared_pair_data(const QkvProblem& p, int64_t pair) {
  return p.w_data + pair * PreparedLayout(p.format, p.k).pair_data_bytes();
}
inline const uint16_t* prepared_pair_scales(const QkvProblem& p, int64_t pair) {
  return p.w_scales + pair * PreparedLayout(p.format, p.k).pair_scales();
}
}  // namespace

namespace {
// The driver loop of every pair kernel: for each tile of at most kTileRows rows from row 0,
// compute(m0, rows, tile) fills tile [rows][kPairCols] with the pair's fp32 sums, then the
// epilogue stores the pair's columns of those rows. (A decode-sized M is one tile.)
template <int kTileRows, typename Compute>
inline void for_each_row_tile(const QkvProblem& p, int64_t pair, Compute&& compute) {
  alignas(64) float tile[kTileRows * kPairCols];
  const int64_t n0 = pair * kPairCols;
  const int cols = int(p.n - n0 < kPairCols ? p.n - n0 : kPairCols);
  for (int64_t m0 = 0; m0 < p.m; m0 += kTileRows) {
    const int rows = int(p.m - m0 < kTileRows ? p.m - m0 : kTileRows);
    compute(m0, rows, tile);
    p.epi(m0, rows, n0, cols, tile, kPairCols);
  }
}

// body(StaticCount<SFV / 4>{}): the 4-k groups per block of an fp4 format (4 for NVFP4's
// SFV = 16, 8 for MXFP4's 32) as a compile-time constant.
template <typename Body>
inline void with_fp4_groups(int sfv, Body&& body) {
  if (sfv == 16) {
    body(StaticCount<4>{});
  } else {
    body(StaticCount<8>{});
  }
}
}  // namespace

namespace {
// Whether pair + 1 is in the calling thread's chunk (p.chunk_pairs) and so computed next by
// the same thread.
inline bool next_pair_in_chunk(const QkvProblem& p, int64_t pair) {
  return (pair + 1) % p.chunk_pairs != 0 && (pair + 1) * kPairCols < p.n;
}

// The next pair of the calling thread's chunk, whose weight a panel kernel prefetches into L2
// while it computes on this pair's panel; empty at the end of a chunk.
struct NextPair {
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;
  static NextPair of(const QkvProblem& p, int64_t pair) {
    return next_pair_in_chunk(p, pair)
               ? NextPair{prepared_pair_data(p, pair + 1), prepared_pair_scales(p, pair + 1)}
               : NextPair{};
  }
  // Block kb (block_bytes of data, both halves) and its kPairCols scales.
  void prefetch_block(int64_t kb, int block_bytes) const {
    if (data == nullptr) return;
    for (int line = 0; line < block_bytes; line += 64) {
      __builtin_prefetch(data + kb * block_bytes + line, 0, 2);
    }
    __builtin_prefetch(scales + kb * kPairCols, 0, 2);
  }
};

// The stream prefetch of the decode-sized kernels: at block kb, block kb + kDirectPrefetchBlocks
// of the pair's weight and scales into L2 — past the pair's end, the next pair's (pair-major
// layout: contiguous) when the same thread computes it next, else nothing: the next chunk may
// go to another thread, and its lines in this core's L2 would be traffic for nothing.
struct DirectPrefetch {
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;
  int64_t end_kb = 0;  // blocks kb + distance < end_kb are prefetched
  static DirectPrefetch of(const QkvProblem& p, int64_t pair) {
    return {prepared_pair_data(p, pair), prepared_pair_scales(p, pair),
            next_pair_in_chunk(p, pair) ? 2 * p.kb_count : p.kb_count};
  }
  void at(int64_t kb, int block_bytes) const {
    const int64_t ahead = kb + kDirectPrefetchBlocks;
    if (ahead >= end_kb) return;
    for (int line = 0; line < block_bytes; line += 64) {
      __builtin_prefetch(data + ahead * block_bytes + line, 0, 2);
    }
    __builtin_prefetch(scales + ahead * kPairCols, 0, 2);
  }
  // Block kb + kDirectL1Blocks of the weight into L1 (kBlockBytes: both halves' bytes of one
  // block), within the pair.
  template <int kBlockBytes>
  void near(int64_t kb, int64_t kb_count) const {
    if (data == nullptr || kb + kDirectL1Blocks >= kb_count) return;
    for (int line = 0; line < kBlockBytes; line += 64)
      __builtin_prefetch(data + (kb + kDirectL1Blocks) * kBlockBytes + line, 0, 3);
  }
};
}  // namespace

// fp4 panel [kb][half][SFV/4 groups][64]: byte 4*lane + i of group g is
// 2 * e2m1(column lane, k = kb*SFV + 4g + i) + 12. The prepared bytes hold groups 2j (low
// nibbles) and 2j + 1 (high nibbles) of one 64-byte chunk j.
inline constexpr uint8_t kBiasedDoubledE2M1[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                   12, 11, 10, 9,  8,  6,  4,  0};
void decode_fp4_panel_scalar(const uint8_t* prepared, int64_t chunks, uint8_t* panel);

// bf16 bits of every e2m1 code (exact).
inline constexpr uint16_t kE2M1Bf16[16] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040,
                                           0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80, 0xBFC0,
                                           0xC000, 0xC040, 0xC080, 0xC0C0};
// 2 * e2m1 of every code as int16 (exact): the weights of the exact integer blocks.
inline constexpr int16_t kE2M1Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};
// Weight-only panel [kb][half][SFV/2 pairs][16 lanes x 2 bf16] from the prepared fp4 data:
// chunk j's byte i holds k = 8j + i (low nibble) and 8j + 4 + i (high), so its four pair
// vectors are (lo b0, lo b1), (lo b2, lo b3), (hi b0, hi b1), (hi b2, hi b3) per lane.
void decode_fp4_bf16_panel_scalar(const uint8_t* prepared, int64_t chunks, uint16_t* panel);

namespace {
// bf16 bits -> float (exact).
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

}  // namespace quantkv::cpu
