// Sparse MLA attention (issue #30): DeepSeek-V3.2's attention over the top-k cache slots its
// lightning indexer picked (quantkv/indexer.hpp, IndexOutput::kGlobalSlots), with FlashMLA's
// sparse semantics. One shared latent head per cache slot: d_qk = d_v + d_rope values (512 + 64
// in DeepSeek-V3.2), of which the first d_v are also the value. Semantics, the evaluation order
// every ISA path replays and the errors: docs/sparse_mla.md (contract §7).
#pragma once

#include <cstdint>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// The FlashMLA fp8 latent-cache row ("fp8_ds_mla", what engines use for DeepSeek-V3.2): per
// slot d_v e4m3 codes, d_v / 128 fp32 scales (one per 128 codes), then d_rope bf16 values,
// packed: 512 + 16 + 128 = 656 bytes for d_v = 512, d_rope = 64.
constexpr int64_t sparse_mla_fp8_row_bytes(int64_t d_v, int64_t d_rope) {
  return d_v + 4 * (d_v / 128) + 2 * d_rope;
}

// For each query token t and head h, over the selected slots s = indices[t, j] (j < top_k, or
// j < topk_length[t] when given; s == -1 skipped):
//   score_j = sm_scale * dot(q[t, h, :], kv[s, :])        (d_qk values)
//   out[t, h, :] = sum_j softmax(score)_j * kv[s, 0:d_v]
//   lse[t, h] = log(sum_j exp(score_j))                   (natural log)
// A token without any valid slot gets out = 0 and lse = -inf. Every ISA path and thread count
// gives the same bits (the canonical order is documented in docs/sparse_mla.md).
struct SparseMlaArgs {
  TensorView<const bfloat16, 3> q;  // [T, H, d_qk] absorbed queries
  // The latent cache, one row per global slot (a paged cache [pages, page_size, row] viewed as
  // [pages * page_size, row]); exactly one of the two:
  TensorView<const bfloat16, 2> kv;          // [num_slots, d_qk] bf16, or
  TensorView<const uint8_t, 2> kv_fp8;       // [num_slots, sparse_mla_fp8_row_bytes(d_v, d_rope)]
  TensorView<const int32_t, 2> indices;      // [T, top_k] global slots in [0, num_slots), or -1
  TensorView<const int32_t, 1> topk_length;  // [T] in [0, top_k], optional
  float sm_scale = 0.0f;                     // finite
  TensorView<bfloat16, 3> out;               // [T, H, d_v] (d_v < d_qk; sets d_rope)
  TensorView<float, 2> lse;                  // [T, H], optional
};
Status sparse_mla_attention(const SparseMlaArgs& args, const Context& ctx);

}  // namespace quantkv
