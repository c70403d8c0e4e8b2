// Host-side validation shared by the CUDA entry points (see cuda_validate.hpp).
#if defined(QUANTKV_WITH_CUDA)
#include "cuda/host/cuda_validate.hpp"

#include <limits>

#include "core/indexer_keys.hpp"
#include "core/view_checks.hpp"

namespace quantkv::cuda::detail {

std::string str(int64_t v) { return std::to_string(v); }

Status validate_ragged(const TensorView<const uint32_t, 1>& device_offs,
                       const PagedKVCacheCollection& device_cache, const HostRagged& host,
                       int64_t total_rows, bool require_pages, const char* cache_name) {
  const std::string n(cache_name);
  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(device_cache, cache_name));
  const int64_t batch = device_cache.batch_size();
  QUANTKV_RETURN_IF_ERROR(check_shape("input_row_offsets", "[B + 1]", device_offs, {batch + 1}));
  if (batch + 1 > 1 && device_offs.strides[0] != 1) {
    return invalid_argument(
        "input_row_offsets: expected a contiguous device array (stride 1), "
        "got stride " +
        str(device_offs.strides[0]));
  }
  QUANTKV_RETURN_IF_ERROR(
      check_shape("host.input_row_offsets", "[B + 1]", host.input_row_offsets, {batch + 1}));
  QUANTKV_RETURN_IF_ERROR(check_shape("host.cache_lengths", "[B]", host.cache_lengths, {batch}));
  QUANTKV_RETURN_IF_ERROR(check_shape("host.lookup_table", "[B, max_pages_per_seq]",
                                      host.lookup_table,
                                      {batch, device_cache.max_pages_per_seq()}));
  QUANTKV_RETURN_IF_ERROR(
      validate_row_offsets(host.input_row_offsets, batch, total_rows, "host.input_row_offsets"));
  PagedKVCacheCollection mirror = device_cache;
  mirror.cache_lengths = host.cache_lengths;
  mirror.lookup_table = host.lookup_table;
  QUANTKV_RETURN_IF_ERROR(
      validate_ragged_cache(mirror, host.input_row_offsets, require_pages, cache_name));
  for (int64_t b = 0; b < batch; ++b) {  // positions are int32 in the kernels
    const int64_t end =
        int64_t(host.cache_lengths(b)) + host.input_row_offsets(b + 1) - host.input_row_offsets(b);
    if (end > std::numeric_limits<int32_t>::max()) {
      return out_of_range(n + ".cache_lengths: sequence " + str(b) + " reaches position " +
                          str(end) + ", the CUDA backend supports < 2^31");
    }
  }
  return Status::Ok();
}

Status check_int32(const char* name, int64_t value) {
  if (value < 0 || value > std::numeric_limits<int32_t>::max()) {
    return invalid_argument(std::string(name) +
                            ": expected 0 <= value < 2^31 on the CUDA "
                            "backend, got " +
                            str(value));
  }
  return Status::Ok();
}

Status check_aligned(const char* name, const void* ptr, int64_t alignment) {
  if (reinterpret_cast<uintptr_t>(ptr) % uintptr_t(alignment) != 0) {
    return invalid_argument(std::string(name) + ": expected a " + str(alignment) +
                            "-byte aligned device pointer on the CUDA backend");
  }
  return Status::Ok();
}

namespace {
// The cache lengths and the page table of a cache (either kind) into a launch struct.
template <typename Cache, typename Rows>
void set_page_table(const Cache& c, Rows* r) {
  r->cache_lengths = c.cache_lengths.data;
  r->cache_lengths_stride = c.cache_lengths.strides[0];
  r->lookup_table = c.lookup_table.data;
  r->lut_stride0 = c.lookup_table.strides[0];
  r->lut_stride1 = c.lookup_table.strides[1];
}
}  // namespace

launch::PagedRows paged_rows(const PagedKVCacheCollection& c, uint32_t layer_idx) {
  launch::PagedRows r;
  r.blocks = c.blocks;
  r.scales = c.scales;
  r.scale_cols = c.scale_cols();
  r.dtype = int(c.dtype);
  r.num_blocks = c.num_blocks;
  r.kv_dim = c.kv_dim;
  r.num_layers = c.num_layers;
  r.page_size = c.page_size;
  r.num_heads = c.num_heads;
  r.head_size = c.head_size;
  r.layer = layer_idx;
  set_page_table(c, &r);
  return r;
}

namespace {
// The byte addressing the CPU backend uses too (one definition of the layouts).
launch::IndexerKeyRows from_core(const quantkv::detail::IndexerKeys& c, int64_t num_blocks) {
  launch::IndexerKeyRows k;
  k.rows = c.rows;
  k.row_page_bytes = c.row_page_stride;
  k.row_slot_bytes = c.row_slot_stride;
  k.scales = c.scales;
  k.scale_page_bytes = c.scale_page_stride;
  k.scale_slot_bytes = c.scale_slot_stride;
  k.num_blocks = num_blocks;
  k.page_size = c.page_size;
  set_page_table(c, &k);
  return k;
}
}  // namespace

launch::IndexerKeyRows indexer_key_rows(const PagedKVCacheCollection& c, uint32_t layer_idx) {
  return from_core(quantkv::detail::indexer_keys(c, layer_idx), c.num_blocks);
}

launch::IndexerKeyRows indexer_key_rows(const EngineIndexerKCache& c) {
  return from_core(quantkv::detail::indexer_keys(c), c.num_blocks);
}

}  // namespace quantkv::cuda::detail
#endif  // QUANTKV_WITH_CUDA
