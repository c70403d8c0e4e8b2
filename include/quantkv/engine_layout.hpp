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

// How the keys of an engine-layout indexer K cache are stored (docs/indexer.md, "MXFP4 K cache").
enum class IndexKFormat : int {
  kFp8 = 0,    // e4m3 row of D bytes and one float32 scale per token (DeepSeek-V3.2)
  kMxfp4 = 1,  // e2m1 codes, D/2 bytes (element 2i in the low nibble of byte i, 2i+1 in the
               // high), and D/32 ue8m0 block-scale bytes per token (DeepSeek-V4's
               // use_fp4_cache)
  kNvfp4 = 2,  // the same codes and D/16 e4m3 block-scale bytes per token, with one per-tensor
               // global_scale (NVFP4: sf = e4m3(global_scale * amax / 6), value = code * sf /
               // global_scale)
};
const char* index_k_format_name(IndexKFormat format);

// One layer's indexer K cache as the engines keep it: one paged byte buffer, each page holding
// its page_size key rows, then their page_size scale rows:
//   page p, bytes [0, page_size * R)                  key row of slot s at s * R
//   page p, bytes [page_size * R, page_size * (R+S))  scale row of slot s at page_size * R + S * s
// with R = D, S = 4 (one float32) for kFp8, R = D/2, S = D/32 (ue8m0 bytes) for kMxfp4 and
// R = D/2, S = D/16 (e4m3 bytes) for kNvfp4.
// vLLM's `indexer_k_quant_and_cache` / `cp_gather_indexer_k_quant_cache` and SGLang's NSA
// index-K buffer view the fp8 form as uint8 [num_blocks, page_size * (D + 4)] (quant block = D:
// one scale per token); DeepGEMM's fp8_paged_mqa_logits as uint8 [num_blocks, page_size, 1, D + 4]
// (same bytes); vLLM's DeepSeek-V4 indexer (kv_cache_as_quant_view, the fused compressor's
// MXFP4 insert) the MXFP4 form as [num_blocks, page_size, 1, D/2 + D/32]. Pages may be padded:
// page_stride_bytes >= page_size * (R + S).
// Alignment (kFp8): data, D and page_stride_bytes are multiples of 4, so every scale is an
// aligned float. kMxfp4 needs D to be a multiple of 32, kNvfp4 of 16; neither needs alignment.
struct EngineIndexerKCache {
  uint8_t* data = nullptr;  // [num_blocks, page_stride_bytes]
  int64_t num_blocks = 0;
  int64_t page_size = 0;                        // tokens per page (the engines' block_size)
  int64_t head_size = 0;                        // D
  int64_t page_stride_bytes = 0;                // 0: packed, page_size * (R + S)
  TensorView<const uint32_t, 1> cache_lengths;  // [B]   tokens cached before this call
  TensorView<const uint32_t, 2> lookup_table;   // [B, max_pages_per_seq]; >= num_blocks: none
  IndexKFormat format = IndexKFormat::kFp8;
  float global_scale = 1.0f;  // kNvfp4 only: the per-tensor scale g (finite, > 0)

  int64_t batch_size() const { return cache_lengths.shape[0]; }
  bool fp4() const { return format == IndexKFormat::kMxfp4 || format == IndexKFormat::kNvfp4; }
  // R and S above: the bytes of one key row and of one scale row.
  int64_t key_row_bytes() const { return fp4() ? head_size / 2 : head_size; }
  int64_t scale_row_bytes() const {
    return format == IndexKFormat::kMxfp4   ? head_size / 32
           : format == IndexKFormat::kNvfp4 ? head_size / 16
                                            : int64_t(sizeof(float));
  }
  int64_t page_bytes() const {
    return page_stride_bytes != 0 ? page_stride_bytes
                                  : page_size * (key_row_bytes() + scale_row_bytes());
  }
  // Byte offset of the key row of (page, slot), and of its scale row.
  int64_t key_offset(int64_t page, int64_t slot) const {
    return page * page_bytes() + slot * key_row_bytes();
  }
  int64_t scale_offset(int64_t page, int64_t slot) const {
    return page * page_bytes() + page_size * key_row_bytes() + slot * scale_row_bytes();
  }
};

// Checks the engine cache itself: a known format, positive dims, D a multiple of 4 (kFp8), 32
// (kMxfp4) or 16 (kNvfp4), a finite positive global_scale (kNvfp4), the stride holding a packed
// page (and for kFp8 a multiple of 4, with 4-byte aligned data), lookup_table rows == cache_lengths
// rows.
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

// The K store writing the engine layout (kFp8: the same quantisation, bit for bit, as the MAX
// form; kMxfp4: per 32-element block s = 2^ceil(log2(max(amax, 6 * 2^-126) * fl(1/6))),
// clamped to 2^[-127, 127], stored as the byte log2(s) + 127, and codes e2m1(x / s) rounded to
// nearest even and saturated to +-6: vLLM's DeepSeek-V4 insert; kNvfp4: per 16 elements the
// NVFP4 recipe of contract §5 with k_cache.global_scale. scale_mode must be kPowerOfTwo, the
// default, for the fp4 forms).
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
