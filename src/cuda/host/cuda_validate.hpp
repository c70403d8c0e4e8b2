// Host-side validation shared by the CUDA entry points (src/cuda_*.cpp). Device arrays are
// never read here: the ragged metadata is checked on the caller's host copies (HostRagged).
#pragma once

#include <cstdint>
#include <string>

#include "cuda/launch.hpp"
#include "quantkv/cuda.hpp"

namespace quantkv::cuda::detail {

std::string str(int64_t v);

// The device metadata views (offsets, cache_lengths, lookup_table) have the shapes of the host
// copies; the host copies are valid (offsets monotone and ending at `total_rows`, every
// sequence fits the lookup table, and with `require_pages` every page it touches exists).
// The device offsets must be contiguous (kernels binary-search them).
Status validate_ragged(const TensorView<const uint32_t, 1>& device_offs,
                       const PagedKVCacheCollection& device_cache, const HostRagged& host,
                       int64_t total_rows, bool require_pages, const char* cache_name);

// `value` must be 0 <= value <= INT32_MAX (kernels index with 32-bit integers).
Status check_int32(const char* name, int64_t value);

// `ptr` must be aligned to `alignment` bytes.
Status check_aligned(const char* name, const void* ptr, int64_t alignment);

// The cache's geometry as the kernels see it (device pointers).
launch::PagedRows paged_rows(const PagedKVCacheCollection& cache, uint32_t layer_idx);

// The indexer K cache's rows and scales in bytes, from either form (device pointers).
launch::IndexerKeyRows indexer_key_rows(const PagedKVCacheCollection& cache, uint32_t layer_idx);
launch::IndexerKeyRows indexer_key_rows(const EngineIndexerKCache& cache);

}  // namespace quantkv::cuda::detail
