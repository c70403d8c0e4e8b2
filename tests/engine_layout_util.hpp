// Test helper: a copy of one layer of a MAX indexer K cache in the engines' layout
// (include/quantkv/engine_layout.hpp), with the same page ids and the same page table, so
// that every case can run over both forms.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "quantkv/engine_layout.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::testing {

struct EngineCopy {
  std::vector<float> storage;  // float elements: the buffer is 4-byte aligned
  EngineIndexerKCache view;
};

// Copies every page's key rows and scales of `layer`; `pad_bytes` (a multiple of 4) pads each
// page, as an engine may, and is filled with 0xEE so a misplaced read shows.
inline EngineCopy make_engine_copy(const PagedKVCacheCollection& c, uint32_t layer,
                                   int64_t pad_bytes = 0) {
  EngineCopy e;
  EngineIndexerKCache& v = e.view;
  v.num_blocks = c.num_blocks;
  v.page_size = c.page_size;
  v.head_size = c.head_size;
  v.page_stride_bytes = pad_bytes == 0 ? 0 : c.page_size * (c.head_size + 4) + pad_bytes;
  e.storage.resize(std::size_t(v.num_blocks * v.page_bytes() / 4));
  v.data = reinterpret_cast<uint8_t*>(e.storage.data());
  std::memset(v.data, 0xEE, e.storage.size() * 4);
  v.cache_lengths = c.cache_lengths;
  v.lookup_table = c.lookup_table;
  const auto* blocks = static_cast<const uint8_t*>(c.blocks);
  for (int64_t page = 0; page < c.num_blocks; ++page) {
    for (int64_t slot = 0; slot < c.page_size; ++slot) {
      std::memcpy(v.data + v.key_offset(page, slot),
                  blocks + c.element_offset(page, 0, layer, slot, 0, 0), std::size_t(c.head_size));
      std::memcpy(v.data + v.scale_offset(page, slot),
                  c.scales + c.scale_offset(page, 0, layer, slot, 0, 0), sizeof(float));
    }
  }
  return e;
}

// Global slot of each selected position of rows [offs[b], offs[b+1]): page * page_size + slot.
inline std::vector<int32_t> positions_to_global_slots(const std::vector<int32_t>& positions,
                                                      int64_t top_k,
                                                      const std::vector<uint32_t>& offs,
                                                      const PagedKVCacheCollection& c) {
  std::vector<int32_t> slots = positions;
  for (std::size_t b = 0; b + 1 < offs.size(); ++b) {
    for (int64_t t = offs[b]; t < int64_t(offs[b + 1]); ++t) {
      for (int64_t i = 0; i < top_k; ++i) {
        int32_t& v = slots[std::size_t(t * top_k + i)];
        if (v >= 0)
          v = int32_t(int64_t(c.lookup_table(int64_t(b), v / c.page_size)) * c.page_size +
                      v % c.page_size);
      }
    }
  }
  return slots;
}

}  // namespace quantkv::testing
