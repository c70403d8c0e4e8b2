// The private snapshot of a ragged call's cache metadata and row offsets (internal: the
// operations in src/ops take it; nothing outside the library needs it).
#pragma once

#include <cstdint>
#include <vector>

#include "quantkv/paged_kv.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// One private copy of the cache metadata and row offsets a call reads: the operations validate
// the copy and use only it, so a caller (or another thread) that changes cache_lengths,
// the lookup table or the offsets during the call cannot make the call read or write outside
// what was validated. The lookup table is copied only as far as the call needs it: rows of
// P = the most pages any sequence needs; the copy's max_pages_per_seq() is P. Not copyable
// (the views point into the vectors); movable.
struct CacheSnapshot {
  PagedKVCacheCollection cache;           // the caller's collection, metadata views replaced
  TensorView<const uint32_t, 1> offsets;  // [B + 1]
  std::vector<uint32_t> cache_lengths;    // [B]
  std::vector<uint32_t> lookup_table;     // [B, P]
  std::vector<uint32_t> row_offsets;      // [B + 1]

  CacheSnapshot() = default;
  CacheSnapshot(const CacheSnapshot&) = delete;
  CacheSnapshot& operator=(const CacheSnapshot&) = delete;
  CacheSnapshot(CacheSnapshot&&) = default;
  CacheSnapshot& operator=(CacheSnapshot&&) = default;
};

// Reads the offsets and the cache metadata of `cache` (validated by validate_paged_kv
// already) exactly once into `out`, and validates the copy: validate_row_offsets (named
// `offs_name`, offs[B] == total_rows), then validate_ragged_cache (named `cache_name`).
// The operations use nothing but the snapshot afterwards. Fails with kResourceExhausted when
// the copy cannot be allocated.
Status snapshot_ragged_cache(const PagedKVCacheCollection& cache,
                             const TensorView<const uint32_t, 1>& offs, int64_t total_rows,
                             bool require_pages, const char* offs_name, const char* cache_name,
                             CacheSnapshot* out);

}  // namespace quantkv
