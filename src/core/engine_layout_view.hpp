// Internal: the engine-layout indexer K cache described as a MAX collection, so that the
// checks on ragged batches and page tables (validate_ragged_cache, ...) serve both forms. The
// blocks/scales pointers of the result are for validation only: the layouts differ.
#pragma once

#include "quantkv/engine_layout.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::detail {

inline PagedKVCacheCollection as_collection(const EngineIndexerKCache& c) {
  PagedKVCacheCollection v;
  v.blocks = c.data;
  v.dtype = DType::kE4M3;
  v.num_blocks = c.num_blocks;
  v.kv_dim = 1;
  v.num_layers = 1;
  v.page_size = c.page_size;
  v.num_heads = 1;
  v.head_size = c.head_size;
  v.scales = reinterpret_cast<float*>(c.data + c.scale_offset(0, 0));
  v.scale_granularity = c.head_size;
  v.cache_lengths = c.cache_lengths;
  v.lookup_table = c.lookup_table;
  return v;
}

}  // namespace quantkv::detail
