// Block-scaled linear layers (contract §4's GEMM with a row epilogue): y[M, N] = x[M, K] . W^T
// (+ bias), the quantised layers an engine runs — attention's o_proj, the MLP's gate/up/down,
// any projection of an NVFP4, MXFP4 or MXFP8 checkpoint. Same GEMM core, canonical order and
// prepared weights as the fused QKV (quantkv/qkv_fp4.hpp); docs/linear.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// ------------------------------------------------------------------ prepared weights
// The CPU kernels stream a weight in an interleaved layout (16 columns x 4 k per 64-byte vector
// for the int8 dot product of the fp4 formats, 16 columns x 2 k for the bf16 dot product of
// MXFP8) with the block scales widened to bf16 beside it. A model prepares each weight once
// (prepare_weights, or a checkpoint loader) and passes it to every call. The layout is internal
// (it may change between versions); only the library reads it.
namespace detail {
struct PreparedWeightsAccess;  // the library's packer (src/cpu/gemm_driver.cpp)
}  // namespace detail

struct PreparedWeights {
  BlockFormat format = BlockFormat::kNVFP4;
  int64_t n = 0;        // output columns N
  int64_t k = 0;        // input size K
  int64_t n_pairs = 0;  // ceil(N / 32): the kernels work on 32 columns at a time
  bool empty() const { return n == 0; }
  // The packed weight and its scales, read-only (their sizes and addresses, e.g. for memory
  // accounting; the layout is internal).
  const uint8_t* data() const { return data_.data(); }
  std::size_t data_bytes() const { return data_.size(); }
  const uint16_t* scales() const { return scales_.data(); }
  std::size_t scale_count() const { return scales_.size(); }

 private:
  friend struct detail::PreparedWeightsAccess;
  // Per 32-column pair, per scale block, per 16-column half: row_bytes(SFV) bytes per column
  // (packed e2m1 or e4m3), interleaved (src/cpu/qkv_kernels.hpp, PreparedLayout). Padding
  // columns are zero.
  std::vector<uint8_t> data_;
  // Per pair, per scale block, per half: 16 bf16 bit patterns of |scale| (NaN stays NaN).
  std::vector<uint16_t> scales_;
};

// A weight as checkpoints and engines hold it: packed codes [N, row_bytes(K)] (e2m1 pairs, even
// k in the low nibble, or e4m3 bytes) and its block scales, either the 5-D swizzled tensor of
// contract §4 (`scale`) or row-major [N, K / SF_VECTOR_SIZE] (`scale_rows`, as compressed-tensors,
// ModelOpt and gpt-oss store them); exactly one of the two.
struct WeightSource {
  TensorView<const uint8_t, 2> data;        // [N, row_bytes(K)]
  TensorView<const uint8_t, 5> scale;       // [ceil(N/128), ceil(Kb/4), 32, 4, 4] swizzled, or
  TensorView<const uint8_t, 2> scale_rows;  // [N, Kb] row-major (unit stride along a row)
  BlockFormat format = BlockFormat::kNVFP4;
};
// Packs `source` into `out` (its buffers are reused when they have the size already).
Status prepare_weights(const WeightSource& source, PreparedWeights* out, const Context& ctx);

// ------------------------------------------------------------------ the linear layer
// One call per layer; every part but x, weight and y is optional.
//   c[m, n] = sum over blocks kb, in the canonical order of docs/linear.md, of the block's dot
//             product x(m, kb) . w(n, kb) times |sx(m, kb)| |sw(n, kb)|  (fp32)
//   y[m, n] = fl(c[m, n] * alpha(n)) (+ bias[n] in fp32), rounded to bf16 (RNE) or kept fp32.
// The activations come in one of two forms:
//   quantised (W4A4 NVFP4 / MXFP4, MXFP8): `x` [M, row_bytes(K)] in the weight's format and its
//     5-D swizzled block scales `x_scale` (quantize_dynamic_block_scaled gives both);
//     alpha = 1 / (g_x * g_w) for NVFP4, 1 for MX formats;
//   bf16 (weight-only: W4A16 for NVFP4 / MXFP4, W8A16 for MXFP8): `x_bf16` [M, K];
//     alpha = the weight's own factor (1 / g_w for NVFP4, 1 for MX formats).
// Results are bitwise identical across ISA paths and thread counts, and equal the fused QKV's
// Q columns for the same data (docs/linear.md).
struct LinearArgs {
  TensorView<const uint8_t, 2> x;        // [M, row_bytes(K)], or empty
  TensorView<const uint8_t, 5> x_scale;  // 5-D swizzled, R = M, Kb = K / SF_VECTOR_SIZE
  TensorView<const bfloat16, 2> x_bf16;  // [M, K], or empty
  const PreparedWeights* weight = nullptr;
  float alpha = 1.0f;                       // every column's factor, unless
  TensorView<const float, 1> column_alpha;  // [N]: one per column (stacked shards' factors)
  TensorView<const float, 1> bias;          // [N] fp32, or
  TensorView<const bfloat16, 1> bias_bf16;  // [N] bf16 (at most one of the two)
  TensorView<bfloat16, 2> y;                // [M, N] bf16, or
  TensorView<float, 2> y_f32;               // [M, N] fp32 (exactly one of the two)
};
Status linear(const LinearArgs& args, const Context& ctx);

}  // namespace quantkv
