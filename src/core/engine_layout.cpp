// The engines' indexer K cache layout (include/quantkv/engine_layout.hpp): its validation, the
// global-slot option's check, and the byte addressing both cache forms reduce to
// (core/indexer_keys.hpp).
#include "quantkv/engine_layout.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "core/indexer_keys.hpp"
#include "core/view_checks.hpp"

namespace quantkv {
namespace {
std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

const char* index_k_format_name(IndexKFormat format) {
  switch (format) {
    case IndexKFormat::kFp8:
      return "fp8";
    case IndexKFormat::kMxfp4:
      return "mxfp4";
    case IndexKFormat::kNvfp4:
      return "nvfp4";
  }
  return "unknown";
}

Status validate_engine_k_cache(const EngineIndexerKCache& c, const char* name) {
  const std::string n(name);
  if (c.format != IndexKFormat::kFp8 && c.format != IndexKFormat::kMxfp4 &&
      c.format != IndexKFormat::kNvfp4) {
    return invalid_argument(n + ".format: expected IndexKFormat::kFp8, kMxfp4 or kNvfp4, got " +
                            str(int(c.format)));
  }
  const bool fp8 = c.format == IndexKFormat::kFp8;
  const struct {
    const char* field;
    int64_t value;
  } dims[] = {{"num_blocks", c.num_blocks}, {"page_size", c.page_size}, {"head_size", c.head_size}};
  for (const auto& d : dims) {
    if (d.value < 1)
      return invalid_argument(n + "." + d.field + ": expected >= 1, got " + str(d.value));
  }
  // Page ids are uint32 and num_blocks is the sentinel.
  if (c.num_blocks > int64_t(UINT32_MAX)) {
    return invalid_argument(n + ".num_blocks: expected <= 2^32-1, got " + str(c.num_blocks));
  }
  if (fp8 && (c.head_size % 4 != 0 || c.head_size > (int64_t(1) << 16))) {
    return invalid_argument(
        n + ".head_size: expected a multiple of 4 (aligned float scales) <= 65536, got " +
        str(c.head_size));
  }
  const int64_t block = c.format == IndexKFormat::kMxfp4 ? 32 : 16;
  if (!fp8 && (c.head_size % block != 0 || c.head_size > (int64_t(1) << 16))) {
    return invalid_argument(n + ".head_size: expected a multiple of " + str(block) + " (" +
                            index_k_format_name(c.format) + " blocks) <= 65536 for the " +
                            index_k_format_name(c.format) + " format, got " + str(c.head_size));
  }
  if (c.format == IndexKFormat::kNvfp4 &&
      !(std::isfinite(c.global_scale) && c.global_scale > 0.0f)) {
    return invalid_argument(
        n + ".global_scale: expected a finite value > 0 for the nvfp4 format, got " +
        std::to_string(c.global_scale));
  }
  if (c.page_size > (int64_t(1) << 24)) {
    return invalid_argument(n + ".page_size: expected <= 2^24, got " + str(c.page_size));
  }
  // < 2^41: no overflow
  const int64_t packed = c.page_size * (c.key_row_bytes() + c.scale_row_bytes());
  if (c.page_stride_bytes != 0 &&
      (c.page_stride_bytes < packed || (fp8 && c.page_stride_bytes % 4 != 0))) {
    return invalid_argument(n + ".page_stride_bytes: expected 0 (packed) or " +
                            (fp8 ? "a multiple of 4 " : "") + ">= page_size * (" +
                            (fp8 ? "head_size + 4" : "head_size / 2 + head_size / 32") +
                            ") = " + str(packed) + ", got " + str(c.page_stride_bytes));
  }
  if (c.page_bytes() > INT64_MAX / c.num_blocks) {
    return invalid_argument(n + ".num_blocks: " + str(c.num_blocks) + " pages of " +
                            str(c.page_bytes()) + " bytes overflow a 64-bit byte offset");
  }
  if (c.data == nullptr) return invalid_argument(n + ".data: data pointer is null");
  if (fp8 && reinterpret_cast<uintptr_t>(c.data) % alignof(float) != 0) {
    return invalid_argument(
        n + ".data: expected 4-byte alignment (the float scales are read in place)");
  }
  QUANTKV_RETURN_IF_ERROR(
      check_shape((n + ".cache_lengths").c_str(), "[B]", c.cache_lengths, {kAnyExtent}));
  return check_shape((n + ".lookup_table").c_str(), "[B, max_pages_per_seq]", c.lookup_table,
                     {c.cache_lengths.shape[0], kAnyExtent});
}

Status validate_index_output(IndexOutput output, int64_t num_blocks, int64_t page_size,
                             const char* cache_name) {
  if (output != IndexOutput::kPositions && output != IndexOutput::kGlobalSlots) {
    return invalid_argument(
        "options.output: expected IndexOutput::kPositions or kGlobalSlots, got " +
        str(int(output)));
  }
  if (output == IndexOutput::kGlobalSlots && page_size > 0 &&
      num_blocks > (int64_t(INT32_MAX) + 1) / page_size) {
    return out_of_range("options.output: global slots need " + std::string(cache_name) +
                        ".num_blocks * page_size <= 2^31 (int32 indices), got " + str(num_blocks) +
                        " * " + str(page_size));
  }
  return Status::Ok();
}

const char* index_output_name(IndexOutput output) {
  switch (output) {
    case IndexOutput::kPositions:
      return "positions";
    case IndexOutput::kGlobalSlots:
      return "global_slots";
  }
  return "unknown";
}

namespace detail {

IndexerKeys indexer_keys(const PagedKVCacheCollection& c, uint32_t layer) {
  IndexerKeys k;
  k.rows = static_cast<uint8_t*>(c.blocks) + c.element_offset(0, 0, layer, 0, 0, 0);
  k.row_page_stride = c.element_offset(1, 0, 0, 0, 0, 0);
  k.row_slot_stride = c.element_offset(0, 0, 0, 1, 0, 0);
  if (c.scales != nullptr && c.scale_granularity > 0) {  // a view without scales is planned too
    k.scales = reinterpret_cast<uint8_t*>(c.scales + c.scale_offset(0, 0, layer, 0, 0, 0));
    k.scale_page_stride = c.scale_offset(1, 0, 0, 0, 0, 0) * int64_t(sizeof(float));
    k.scale_slot_stride = c.scale_offset(0, 0, 0, 1, 0, 0) * int64_t(sizeof(float));
  }
  k.page_size = c.page_size;
  k.cache_lengths = c.cache_lengths;
  k.lookup_table = c.lookup_table;
  return k;
}

IndexerKeys indexer_keys(const EngineIndexerKCache& c) {
  IndexerKeys k;
  k.rows = c.data;
  k.row_page_stride = c.page_bytes();
  k.row_slot_stride = c.key_row_bytes();
  k.scales = c.data + c.scale_offset(0, 0);
  k.scale_page_stride = c.page_bytes();
  k.scale_slot_stride = c.scale_row_bytes();
  k.format = c.format;
  k.global_scale = c.global_scale;
  k.page_size = c.page_size;
  k.cache_lengths = c.cache_lengths;
  k.lookup_table = c.lookup_table;
  return k;
}

}  // namespace detail
}  // namespace quantkv
