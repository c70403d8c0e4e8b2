// The paged KV cache of contract §2 (MAX's PagedKVCacheCollection): a non-owning view that the
// operations take, its validation, ragged-batch helpers, and an owning cache for tests,
// benchmarks, the demo and the bindings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "quantkv/formats.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

// Non-owning view of one paged cache, row-major:
//   blocks  [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size] of `dtype`
//   scales  float32 [num_blocks, kv_dim, num_layers, page_size, num_heads, scale_cols()]
//           (optional: fp8 caches with per-token scales, e.g. the indexer's K cache)
//   cache_lengths [B]   tokens cached before this call
//   lookup_table  [B, max_pages_per_seq]   page ids; entries >= num_blocks are sentinels
// Position p of sequence b lives in page lookup_table[b][p / page_size], slot p % page_size.
struct PagedKVCacheCollection {
  void* blocks = nullptr;
  DType dtype = DType::kBF16;
  int64_t num_blocks = 0;
  int64_t kv_dim = 2;  // 2: K and V; 1: K only (MLA-style)
  int64_t num_layers = 1;
  int64_t page_size = 0;
  int64_t num_heads = 0;
  int64_t head_size = 0;
  float* scales = nullptr;        // nullptr: the cache carries no scales
  int64_t scale_granularity = 0;  // elements per scale along head_size (when scales != null)
  TensorView<const uint32_t, 1> cache_lengths;  // [B]
  TensorView<const uint32_t, 2> lookup_table;   // [B, max_pages_per_seq]

  int64_t batch_size() const { return cache_lengths.shape[0]; }
  int64_t max_pages_per_seq() const { return lookup_table.shape[1]; }
  int64_t scale_cols() const {
    return scale_granularity > 0 ? (head_size + scale_granularity - 1) / scale_granularity : 0;
  }
  // Element (page, kv, layer, slot, head, d) of `blocks`, in elements.
  int64_t element_offset(int64_t page, int64_t kv, int64_t layer, int64_t slot, int64_t head,
                         int64_t d) const {
    return ((((page * kv_dim + kv) * num_layers + layer) * page_size + slot) * num_heads + head) *
               head_size +
           d;
  }
  // Scale of element d of (page, kv, layer, slot, head), in floats.
  int64_t scale_offset(int64_t page, int64_t kv, int64_t layer, int64_t slot, int64_t head,
                       int64_t d) const {
    return ((((page * kv_dim + kv) * num_layers + layer) * page_size + slot) * num_heads + head) *
               scale_cols() +
           d / scale_granularity;
  }
  // Page id holding position `pos` of sequence `b` (may be a sentinel >= num_blocks).
  uint32_t page_of(int64_t b, int64_t pos) const { return lookup_table(b, pos / page_size); }
  // Elements of `blocks` (validate_paged_kv checks that the product and its bytes fit).
  int64_t total_elements() const {
    return num_blocks * kv_dim * num_layers * page_size * num_heads * head_size;
  }
  // Floats of `scales` (0 without scales).
  int64_t total_scales() const {
    return scale_granularity > 0
               ? num_blocks * kv_dim * num_layers * page_size * num_heads * scale_cols()
               : 0;
  }
};

// Checks the collection itself: positive dims, non-null storage, the scales' presence and
// granularity, lookup_table rows == cache_lengths rows, and that the element counts and byte
// sizes of `blocks` and `scales` fit in int64 (no later offset computation can wrap).
// `name` prefixes the messages.
Status validate_paged_kv(const PagedKVCacheCollection& cache, const char* name);

// Checks ragged row offsets: rank 1, shape [batch_size + 1], offs[0] == 0, non-decreasing,
// offs[B] == total_rows. `name` is the argument's name in messages.
Status validate_row_offsets(const TensorView<const uint32_t, 1>& offs, int64_t batch_size,
                            int64_t total_rows, const char* name);

// For every sequence b: cache_lengths[b] + seq_len[b] positions must fit in the lookup table
// (cache_len + seq_len <= max_pages_per_seq * page_size). When `require_pages` is true, every
// page holding a position below that bound must be a real page (< num_blocks).
Status validate_ragged_cache(const PagedKVCacheCollection& cache,
                             const TensorView<const uint32_t, 1>& offs, bool require_pages,
                             const char* cache_name);

// Sequence of each row: the b with offs[b] <= row < offs[b+1] (rows of empty sequences are
// skipped). Returns a vector of size offs[B].
std::vector<int32_t> row_to_sequence(const TensorView<const uint32_t, 1>& offs);

// ----------------------------------------------------------------- owning cache
struct PagedKVCacheConfig {
  DType dtype = DType::kBF16;
  int64_t num_blocks = 0;
  int64_t kv_dim = 2;
  int64_t num_layers = 1;
  int64_t page_size = 16;
  int64_t num_heads = 1;
  int64_t head_size = 128;
  int64_t scale_granularity = 0;  // 0: no scales tensor
  int64_t batch_size = 1;
  int64_t max_pages_per_seq = 1;
};

// Owns the storage of a paged cache. Pages are handed out from a pool shuffled with `seed`, so
// the pages of a sequence are not contiguous, as in a serving engine. Unassigned lookup-table
// entries hold the sentinel num_blocks.
class PagedKVCache {
 public:
  static Status create(const PagedKVCacheConfig& config, uint64_t seed, PagedKVCache* out);

  const PagedKVCacheConfig& config() const { return config_; }
  // Gives sequence b pages so that positions [0, num_positions) are backed.
  //
  // Thread safety: none of these methods synchronise. Do not call reserve / set_cache_length
  // (or write the raw_* vectors) while an operation runs on view(): that is a data race. The
  // operations snapshot the metadata once (CacheSnapshot), so such a race cannot make them
  // read or write outside the cache, but which lengths they see is undefined.
  Status reserve(int64_t b, int64_t num_positions);
  // Marks `length` tokens of sequence b as cached (they must be reserved).
  Status set_cache_length(int64_t b, int64_t length);
  uint32_t cache_length(int64_t b) const { return cache_lengths_[b]; }
  int64_t pages_used(int64_t b) const;
  int64_t free_pages() const { return int64_t(free_pool_.size()); }

  // The view the operations take.
  PagedKVCacheCollection view();

  // Element (b, pos, kv, layer, head, d) decoded to float (the page must be assigned).
  float get(int64_t b, int64_t pos, int64_t kv, int64_t layer, int64_t head, int64_t d) const;
  // Scale of (b, pos, kv, layer, head, d), for caches with scales.
  float get_scale(int64_t b, int64_t pos, int64_t kv, int64_t layer, int64_t head, int64_t d) const;

  std::vector<uint8_t>& raw_blocks() { return blocks_; }
  std::vector<float>& raw_scales() { return scales_; }
  std::vector<uint32_t>& raw_lookup_table() { return lookup_table_; }
  std::vector<uint32_t>& raw_cache_lengths() { return cache_lengths_; }

 private:
  static Status create_unguarded(const PagedKVCacheConfig& config, uint64_t seed,
                                 PagedKVCache* out);

  PagedKVCacheConfig config_;
  std::vector<uint8_t> blocks_;
  std::vector<float> scales_;
  std::vector<uint32_t> cache_lengths_;
  std::vector<uint32_t> lookup_table_;
  std::vector<uint32_t> free_pool_;  // popped from the back
};

// Reads element `offset` of a runtime-typed buffer as float; writes float `v` converted to
// `dtype` (RNE; e4m3 saturating).
float load_as_float(const void* base, DType dtype, int64_t offset);
void store_from_float(void* base, DType dtype, int64_t offset, float v);

}  // namespace quantkv
