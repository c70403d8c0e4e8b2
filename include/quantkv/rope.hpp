// Rotary position embeddings over the paged cache (MAX's fused_qk_rope_ragged) and the
// rotation options shared with the indexer's front end (include/quantkv/indexer.hpp).
#pragma once

#include <cstdint>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// Which elements of the rope part form a rotated pair (i < rope_dim / 2):
enum class RopeLayout : int {
  kInterleaved = 0,  // (x[2i], x[2i+1]): GPT-J style, MAX's interleaved=True, DeepSeek's MLA
  kHalfSplit = 1,    // (x[i], x[i + rope_dim/2]): GPT-NeoX style, DeepSeek-V3.2's fixed indexer
};
// Where the rope_dim rotated elements sit in a row of head_size elements.
enum class RopePlacement : int {
  kTrailing = 0,  // the last rope_dim (MAX, DeepSeek's MLA: [nope | rope])
  kLeading = 1,   // the first rope_dim (DeepSeek-V3.2's indexer: [rope | nope])
};
const char* rope_layout_name(RopeLayout layout);
const char* rope_placement_name(RopePlacement placement);

// The rotation of one row at position p: pair i turns by the angle of row p of `freqs_cis`,
//   (a, b) -> (a*cos - b*sin, a*sin + b*cos), each product rounded to fp32, then the sum.
struct RopeOptions {
  // [max_seq_len, rope_dim]: row p holds (cos_0, sin_0, cos_1, sin_1, ...) of position p
  // (MAX's layout; torch.view_as_real of DeepSeek's complex freqs_cis). rope_dim = shape[1],
  // even and <= the row length.
  TensorView<const float, 2> freqs_cis;
  // [T] explicit positions; empty (shape [0]): the token's position in its sequence,
  // cache_len[b] + i (the K store, fused_qk_rope_ragged), or required (the Q prepare).
  TensorView<const uint32_t, 1> position_ids;
  RopeLayout layout = RopeLayout::kInterleaved;
  RopePlacement placement = RopePlacement::kTrailing;
};

// MAX's fused_qk_rope_ragged: for every new token t (row t = offs[b] + i, position
// pos = position_ids[t] or cache_len[b] + i), writes output[t, h, :] = q_proj[t, h, :] with its
// rope part rotated, and rotates the rope part of every head of K at position pos of the paged
// cache in place (kv index 0 of `layer_idx`). The cache element is read in its dtype (bf16, fp16,
// f32, e4m3; e4m3 multiplied by its scale when the cache carries scales), rotated in fp32 and
// written back once, rounded to nearest even (e4m3: divided by the same scale, saturating).
// rope_dim = freqs_cis.shape[1]; options.placement is kTrailing in MAX (kLeading is allowed).
// output may alias q_proj only exactly (the same view); otherwise they must not overlap.
Status fused_qk_rope_ragged(TensorView<const bfloat16, 3> q_proj,             // [T, Hq, D]
                            TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                            const PagedKVCacheCollection& kv_collection, const RopeOptions& options,
                            uint32_t layer_idx, TensorView<bfloat16, 3> output,  // [T, Hq, D]
                            const Context& ctx);
Status fused_qk_rope_ragged(TensorView<const float, 3> q_proj,                // [T, Hq, D]
                            TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                            const PagedKVCacheCollection& kv_collection, const RopeOptions& options,
                            uint32_t layer_idx, TensorView<float, 3> output,  // [T, Hq, D]
                            const Context& ctx);

// The same as one call: fp32 or bf16 q_proj (exactly one view given) with the output of the
// same element type; the fixed forms above are its wrappers (same bits).
struct FusedQkRopeArgs {
  TensorView<const float, 3> q_proj;                // [T, Hq, D] fp32, with output, or
  TensorView<const bfloat16, 3> q_proj_bf16;        // [T, Hq, D] bf16, with output_bf16
  TensorView<const uint32_t, 1> input_row_offsets;  // [B + 1]
  const PagedKVCacheCollection* kv_collection = nullptr;
  uint32_t layer_idx = 0;
  RopeOptions options;
  TensorView<float, 3> output;          // [T, Hq, D]
  TensorView<bfloat16, 3> output_bf16;  // [T, Hq, D]
};
Status fused_qk_rope_ragged(const FusedQkRopeArgs& args, const Context& ctx);

// Fills freqs_cis [max_seq_len, rope_dim] with cos/sin of p * theta^(-2i / rope_dim), computed
// in double and rounded to fp32 (the table of DeepSeek's precompute_freqs_cis without YaRN).
Status make_freqs_cis(TensorView<float, 2> freqs_cis, double theta);

}  // namespace quantkv
