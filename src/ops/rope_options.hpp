// Internal: validation and per-token lookups of RopeOptions, shared by fused_qk_rope_ragged
// (src/ops/rope.cpp) and the indexer front end (src/ops/indexer_k_store.cpp,
// src/ops/indexer_q_prepare.cpp).
#pragma once

#include <cstdint>

#include "quantkv/indexer.hpp"
#include "quantkv/rope.hpp"

namespace quantkv::detail {

// Checks `o` for T tokens whose rows hold `row_len` elements: freqs_cis [max_seq_len, rope_dim]
// with unit inner stride, rope_dim even and in [2, row_len], valid enums, position_ids empty or
// [T] (`positions_required`: must be [T]), and every explicit position < max_seq_len.
// `name` prefixes the messages ("options.rope").
Status validate_rope_options(const RopeOptions& o, int64_t T, int64_t row_len,
                             bool positions_required, const char* name);

// With implicit positions (position_ids empty): the last new position of every sequence,
// cache_len[b] + seq_len[b] - 1, must have a row in freqs_cis.
Status validate_rope_cache_positions(const RopeOptions& o, const PagedKVCacheCollection& c,
                                     const TensorView<const uint32_t, 1>& offs, const char* name);

// Checks an indexer front end for T rows of D elements: the enums, D a power of two with the
// Hadamard rotation, and the RoPE options when RoPE is on (named "front_end.rope...").
Status validate_front_end(const IndexerFrontEnd& fe, int64_t T, int64_t D, bool positions_required);

inline int64_t rope_dim_of(const RopeOptions& o) { return o.freqs_cis.shape[1]; }
// Offset of the rope part in a row of `row_len` elements.
inline int64_t rope_offset(const RopeOptions& o, int64_t row_len) {
  return o.placement == RopePlacement::kLeading ? 0 : row_len - rope_dim_of(o);
}
// The cos/sin row of token t at cache position `cache_pos` (explicit position_ids win).
inline const float* rope_table_row(const RopeOptions& o, int64_t t, int64_t cache_pos) {
  const int64_t pos = o.position_ids.shape[0] > 0 ? int64_t(o.position_ids(t)) : cache_pos;
  return &o.freqs_cis(pos, 0);
}

}  // namespace quantkv::detail
