// The indexer's K cache in the serving engines' layout (vLLM, SGLang, DeepGEMM's
// fp8_paged_mqa_logits), global slot indices for sparse attention, and int32 views of block
// tables and row offsets (docs/indexer.md, "Engine layout").
#pragma once

#include <cstdint>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// One layer's indexer K cache as the engines keep it: one paged byte buffer, each page holding
// its page_size fp8 key rows, then their page_size float32 scales:
//   page p, bytes [0, page_size * D)                       e4m3 key of slot s at s * D
//   page p, bytes [page_size * D, page_size * (D + 4))     float scale of slot s at
//                                                           page_size * D + 4 * s
// vLLM's `indexer_k_quant_and_cache` / `cp_gather_indexer_k_quant_cache` and SGLang's NSA
// index-K buffer view it as uint8 [num_blocks, page_size * (D + 4)] (quant block = D: one
// scale per token); DeepGEMM's fp8_paged_mqa_logits as uint8 [num_blocks, page_size, 1, D + 4]
// (same bytes). Pages may be padded: page_stride_bytes >= page_size * (D + 4).
// Alignment: data, D and page_stride_bytes are multiples of 4, so every scale is an aligned
// float.
struct EngineIndexerKCache {
  uint8_t* data = nullptr;  // [num_blocks, page_stride_bytes]
  int64_t num_blocks = 0;
  int64_t page_size = 0;                        // tokens per page (the engines' block_size)
  int64_t head_size = 0;                        // D
  int64_t page_stride_bytes = 0;                // 0: packed, page_size * (head_size + 4)
  TensorView<const uint32_t, 1> cache_lengths;  // [B]   tokens cached before this call
  TensorView<const uint32_t, 2> lookup_table;   // [B, max_pages_per_seq]; >= num_blocks: none

  int64_t batch_size() const { return cache_lengths.shape[0]; }
  int64_t page_bytes() const {
    return page_stride_bytes != 0 ? page_stride_bytes : page_size * (head_size + 4);
  }
  // Byte offset of the key row of (page, slot), and of its float scale.
  int64_t key_offset(int64_t page, int64_t slot) const {
    return page * page_bytes() + slot * head_size;
  }
  int64_t scale_offset(int64_t page, int64_t slot) const {
    return page * page_bytes() + page_size * head_size + slot * int64_t(sizeof(float));
  }
};

// Checks the engine cache itself: positive dims, D and page stride multiples of 4, the stride
// holding a packed page, 4-byte aligned data, lookup_table rows == cache_lengths rows.
Status validate_engine_k_cache(const EngineIndexerKCache& cache, const char* name);

// `output` is a known value and, for global slots, num_blocks * page_size <= 2^31 (the largest
// slot is an int32). `cache_name` names the cache in messages.
Status validate_index_output(IndexOutput output, int64_t num_blocks, int64_t page_size,
                             const char* cache_name);

struct IndexerOptions {
  IndexOutput output = IndexOutput::kPositions;
  IndexerTimings* timings = nullptr;  // filled when not null
};

// The indexer over MAX's collection, with options: with kGlobalSlots every selected position
// p of sequence b becomes lookup_table[b][p / page_size] * page_size + p % page_size (-1 tail
// kept); num_blocks * page_size must then fit int32.
Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,  // [T, top_k]
                                       TensorView<const float8_e4m3fn, 3> q,   // [T, H, D]
                                       TensorView<const float, 2> q_s,         // [T, H]
                                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const Context& ctx,
                                       const IndexerOptions& options);

// The indexer over the engine layout, read in place: the same scores, order and indices as
// over a MAX collection holding the same keys and scales.
Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,  // [T, top_k]
                                       TensorView<const float8_e4m3fn, 3> q,   // [T, H, D]
                                       TensorView<const float, 2> q_s,         // [T, H]
                                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                                       const EngineIndexerKCache& k_cache, MaskType mask,
                                       const Context& ctx, const IndexerOptions& options = {});

// The K store writing the engine layout (same quantisation, bit for bit, as the MAX form).
Status indexer_k_store(TensorView<const float, 2> k,                     // [T, D]
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const Context& ctx);
Status indexer_k_store(TensorView<const bfloat16, 2> k,                  // [T, D]
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const Context& ctx);

// A zero-cost uint32 view of an int32 block table or row offsets (engines pass int32). A
// negative entry reads as a value >= 2^31: in a lookup table it is a sentinel (no page; an
// error only where the page is needed), in row offsets it breaks "non-decreasing, ends at T"
// and is rejected with the usual message.
template <int Rank>
TensorView<const uint32_t, Rank> as_uint32_view(TensorView<const int32_t, Rank> v) {
  return {reinterpret_cast<const uint32_t*>(v.data), v.shape, v.strides};
}

}  // namespace quantkv
