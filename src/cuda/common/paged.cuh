// Device-side addressing of a paged cache (contract §2) from launch::PagedRows.
#pragma once

#include <cstdint>

#include "cuda/launch.hpp"

namespace quantkv::cuda::detail {

// Row index (page, kv, layer, slot) in units of num_heads * head_size elements; the scale of
// (row, head, col) is at (row * num_heads + head) * scale_cols + col.
__device__ __forceinline__ int64_t paged_row(const launch::PagedRows& c, int64_t page, int64_t kv,
                                             int64_t slot) {
  return ((page * c.kv_dim + kv) * c.num_layers + c.layer) * c.page_size + slot;
}

// Page id of position `pos` of sequence `b` (a sentinel when >= num_blocks).
__device__ __forceinline__ uint32_t page_of(const launch::PagedRows& c, int64_t b, int64_t pos) {
  return c.lookup_table[b * c.lut_stride0 + (pos / c.page_size) * c.lut_stride1];
}

__device__ __forceinline__ uint32_t cache_length(const launch::PagedRows& c, int64_t b) {
  return c.cache_lengths[b * c.cache_lengths_stride];
}

// ---- the indexer's K cache in either form (launch::IndexerKeyRows)
__device__ __forceinline__ uint32_t page_of(const launch::IndexerKeyRows& k, int64_t b,
                                            int64_t pos) {
  return k.lookup_table[b * k.lut_stride0 + (pos / k.page_size) * k.lut_stride1];
}
__device__ __forceinline__ uint32_t cache_length(const launch::IndexerKeyRows& k, int64_t b) {
  return k.cache_lengths[b * k.cache_lengths_stride];
}
__device__ __forceinline__ uint8_t* key_row(const launch::IndexerKeyRows& k, int64_t page,
                                            int64_t slot) {
  return k.rows + page * k.row_page_bytes + slot * k.row_slot_bytes;
}
__device__ __forceinline__ float* key_scale(const launch::IndexerKeyRows& k, int64_t page,
                                            int64_t slot) {
  return reinterpret_cast<float*>(k.scales + page * k.scale_page_bytes + slot * k.scale_slot_bytes);
}

}  // namespace quantkv::cuda::detail
