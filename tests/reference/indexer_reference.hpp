// Internal: the lightning indexer written for clarity, the oracle of the tests (contract §3).
// Straight loops over (token, key, head, d) reading the cache element by element through the
// page table, and a full stable sort per row; nothing shared with the fast path.
#pragma once

#include <cstdint>
#include <vector>

#include "quantkv/indexer.hpp"

namespace quantkv::reference {

enum class ScorePrecision {
  // fp32 in the library's canonical order (docs/indexer.md): must match the kernels bitwise.
  kCanonical,
  // double everywhere: the mathematically faithful score, compared with a tolerance.
  kDouble,
};

struct IndexerReferenceRow {
  std::vector<double> scores;  // [key_bound]
  double magnitude = 0;  // kDouble only: max_j |k_scale| sum_h |q_s| sum_d |q k| (error scale)
};

// score(t, j) for every row t and visible key j. Inputs as the public function; they must be
// valid (the reference does not validate).
std::vector<IndexerReferenceRow> indexer_scores_reference(
    TensorView<const float8_e4m3fn, 3> q,             // [T, H, D]
    TensorView<const float, 2> q_s,                   // [T, H]
    TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
    const PagedKVCacheCollection& k_collection, uint32_t layer_idx, MaskType mask,
    ScorePrecision precision);

// out[0, top_k): the n = min(top_k, scores.size()) best by (score desc, position asc; NaN
// lowest), then -1, by a full stable sort.
void topk_reference(const std::vector<double>& scores, int64_t top_k, int32_t* out);

// The whole operation: scores_reference + topk_reference per row.
void mla_indexer_reference(TensorView<int32_t, 2> output_indices,            // [T, top_k]
                           TensorView<const float8_e4m3fn, 3> q,             // [T, H, D]
                           TensorView<const float, 2> q_s,                   // [T, H]
                           TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                           const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                           MaskType mask, ScorePrecision precision);

// contract §5 quantisation of one row of n values: amax = max(max|x|, 1e-4) (NaN ignored),
// s = amax / 448, optionally rounded up to a power of two; codes[i] = e4m3(x[i] / s).
float quantize_row_reference(const float* x, int64_t n, ScaleMode mode, uint8_t* codes);

}  // namespace quantkv::reference
