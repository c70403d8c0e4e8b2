// Internal: the byte addressing of a paged indexer K cache that both of its forms (MAX's
// collection, the engines' buffer) reduce to; the CPU driver, the K store and the CUDA host
// (launch::IndexerKeyRows) build on it. Defined in src/core/engine_layout.cpp.
#pragma once

#include <cstdint>

#include "quantkv/engine_layout.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::detail {

// Where the keys and scales of a paged indexer K cache lie, in bytes: the key row of (page,
// slot) at rows + page * row_page_stride + slot * row_slot_stride, its scale row (a float for
// kFp8, D/32 ue8m0 bytes for kMxfp4, D/16 e4m3 bytes for kNvfp4) likewise from `scales`. Both forms
// (MAX's collection, the engines' buffer) reduce to this, so the driver reads either in place and
// the K store writes either.
struct IndexerKeys {
  uint8_t* rows = nullptr;
  int64_t row_page_stride = 0, row_slot_stride = 0;
  uint8_t* scales = nullptr;
  int64_t scale_page_stride = 0, scale_slot_stride = 0;
  int64_t page_size = 1;
  IndexKFormat format = IndexKFormat::kFp8;     // MAX's collection: always kFp8
  float global_scale = 1.0f;                    // kNvfp4: the per-tensor scale
  TensorView<const uint32_t, 1> cache_lengths;  // [B]
  TensorView<const uint32_t, 2> lookup_table;   // [B, max_pages_per_seq]

  int64_t batch_size() const { return cache_lengths.shape[0]; }
  uint32_t page_of(int64_t b, int64_t pos) const { return lookup_table(b, pos / page_size); }
  uint8_t* key_row(int64_t page, int64_t slot) const {
    return rows + page * row_page_stride + slot * row_slot_stride;
  }
  uint8_t* scale_bytes(int64_t page, int64_t slot) const {
    return scales + page * scale_page_stride + slot * scale_slot_stride;
  }
};
// Layer `layer` of MAX's collection (e4m3, one head, one scale per token).
IndexerKeys indexer_keys(const PagedKVCacheCollection& c, uint32_t layer);
IndexerKeys indexer_keys(const EngineIndexerKCache& c);

}  // namespace quantkv::detail
