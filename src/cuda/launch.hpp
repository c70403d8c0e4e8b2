// Internal interface between the host-side entry points (src/cuda/host/cuda_*.cpp: validation,
// planning, workspaces) and the kernels (src/cuda/*_sm90.cu). Plain C++: no CUDA types, so the
// validation code compiles with the host compiler and its warnings. Every pointer is device
// memory; every size was validated before a launcher is called. A launcher only enqueues work
// on `stream` (a cudaStream_t) and returns the launch error, if any.
#pragma once

#include <cstdint>

#include "quantkv/status.hpp"

namespace quantkv::cuda::launch {

// Where the rows of one layer of a paged cache live. Row (page, kv, slot) of `layer` starts at
// element ((page * kv_dim + kv) * num_layers + layer) * page_size + slot) * row_elems.
struct PagedRows {
  void* blocks = nullptr;
  float* scales = nullptr;  // per-row scales (indexer K cache) or nullptr
  int64_t scale_cols = 0;   // floats per (slot, head) in `scales`
  int dtype = 0;            // quantkv::DType
  int64_t num_blocks = 0, kv_dim = 1, num_layers = 1, page_size = 1;
  int64_t num_heads = 1, head_size = 1;
  int64_t layer = 0;
  const uint32_t* cache_lengths = nullptr;  // [B], stride cache_lengths_stride
  int64_t cache_lengths_stride = 1;
  const uint32_t* lookup_table = nullptr;  // [B, max_pages]
  int64_t lut_stride0 = 0, lut_stride1 = 1;
};

// ------------------------------------------------------------------ indexer
// Where the e4m3 key rows and float scales of one layer of an indexer K cache lie, in bytes,
// for either form (MAX's collection, the engines' paged buffer): the row of (page, slot) at
// rows + page * row_page_bytes + slot * row_slot_bytes, its scale likewise from `scales`.
struct IndexerKeyRows {
  uint8_t* rows = nullptr;
  int64_t row_page_bytes = 0, row_slot_bytes = 0;
  uint8_t* scales = nullptr;
  int64_t scale_page_bytes = 0, scale_slot_bytes = 0;
  int64_t num_blocks = 0, page_size = 1;
  const uint32_t* cache_lengths = nullptr;  // [B], stride cache_lengths_stride
  int64_t cache_lengths_stride = 1;
  const uint32_t* lookup_table = nullptr;  // [B, max_pages]
  int64_t lut_stride0 = 0, lut_stride1 = 1;
};

// Tokens t_begin .. t_begin+count-1 of sequence b, key bound first_bound + i * bound_step for
// token t_begin + i (bound_step 1 with the causal mask, 0 without).
struct TokenGroup {
  int32_t b, t_begin, count, first_bound, bound_step;
};
inline constexpr int kInlineGroups = 64;  // groups passed in the kernel parameters
// The CUDA indexer's limits (checked on the host, docs/cuda.md): they size the kernels' one
// shared-memory opt-in per device (src/cuda/common/smem_opt_in.hpp).
inline constexpr int32_t kIndexerMaxDim = 512;     // D: staged K and Q rows
inline constexpr int32_t kIndexerMaxTopK = 16384;  // top_k: quantkv::cuda::kMaxTopK
struct IndexerScoresArgs {
  const uint8_t* q = nullptr;  // [T, H, D] e4m3, contiguous
  const float* q_s = nullptr;  // [T, H]
  int64_t qs_stride0 = 0, qs_stride1 = 0;
  int32_t heads = 0, dim = 0;
  IndexerKeyRows k;                              // e4m3 K rows of D bytes, 1 scale per row
  const TokenGroup* groups = nullptr;            // [num_groups] in device memory, or null: then
  TokenGroup inline_groups[kInlineGroups] = {};  // the first num_groups of these
  int32_t num_groups = 0;
  int32_t max_key_tiles = 0;  // grid.x: key tiles of the longest bound in this launch
  float* scores = nullptr;    // [rows of this chunk, score_stride]
  int64_t score_stride = 0;
  int32_t row_base = 0;  // token of scores row 0
};
Status indexer_scores(const IndexerScoresArgs& args, void* stream);

struct TopkArgs {
  const float* scores = nullptr;  // [rows, score_stride]
  int64_t score_stride = 0;
  // Key bounds come from the device metadata (detail::indexer_key_bound).
  const uint32_t* offs = nullptr;           // [B + 1], contiguous
  const uint32_t* cache_lengths = nullptr;  // [B]
  int64_t cache_lengths_stride = 1;
  int32_t batch = 0;
  bool causal = false;
  int32_t row_base = 0, rows = 0;  // tokens row_base .. row_base+rows-1
  int32_t top_k = 0;
  int32_t* out = nullptr;  // [T, top_k]
  int64_t out_stride0 = 0, out_stride1 = 1;
  int32_t max_bound = 0;  // the largest row bound in this launch
  // With global_slots, position p of sequence b is written as page * page_size + slot
  // (keys.lookup_table, keys.page_size); the -1 tail stays.
  bool global_slots = false;
  IndexerKeyRows keys;
};
Status indexer_topk(const TopkArgs& args, void* stream);

// ------------------------------------------------------------------ fused QKV projection
struct QkvArgs {
  const uint8_t* a = nullptr;  // [M, row_bytes]
  int64_t a_stride = 0;        // bytes between rows
  const uint8_t* w = nullptr;  // [N, row_bytes]
  int64_t w_stride = 0;
  const uint8_t* a_scale = nullptr;  // 5-D swizzled, contiguous
  const uint8_t* w_scale = nullptr;
  int32_t M = 0, N = 0, K = 0;
  int32_t format = 0;         // quantkv::BlockFormat
  bool vector_loads = false;  // rows and bases 16-byte aligned, scale tensors 2-byte aligned
  float sf_q = 1, sf_k = 1, sf_v = 1;
  int32_t q_dim = 0, kv_width = 0;
  uint16_t* out = nullptr;  // [M, q_dim] bf16
  int64_t out_stride0 = 0, out_stride1 = 1;
  PagedRows kv;                    // row_elems = num_heads * head_size
  const uint32_t* offs = nullptr;  // [B + 1]
  int64_t offs_stride = 1;
  int32_t batch = 0;
};
Status qkv_gemm(const QkvArgs& args, void* stream);    // tiled, any M
Status qkv_decode(const QkvArgs& args, void* stream);  // M <= 16, streams the weight
inline constexpr int32_t kQkvDecodeMaxRows = 16;

// ------------------------------------------------------------------ quantiser, K store
struct QuantizeArgs {
  const void* x = nullptr;  // [M, K] float or bf16
  bool x_bf16 = false;
  int64_t x_stride0 = 0, x_stride1 = 1;
  int32_t M = 0, K = 0;
  int32_t format = 0;
  float global_scale = 1;
  uint8_t* data = nullptr;  // [M, row_bytes]
  int64_t data_stride0 = 0, data_stride1 = 1;
  uint8_t* scales = nullptr;  // 5-D swizzled, contiguous
};
Status quantize(const QuantizeArgs& args, void* stream);

struct KStoreArgs {
  const void* k = nullptr;  // [T, D] float or bf16
  bool k_bf16 = false;
  int64_t k_stride0 = 0, k_stride1 = 1;
  int32_t T = 0, D = 0;
  bool power_of_two = true;
  IndexerKeyRows cache;            // e4m3 rows of D bytes, 1 scale per row
  const uint32_t* offs = nullptr;  // [B + 1]
  int64_t offs_stride = 1;
  int32_t batch = 0;
};
Status indexer_k_store(const KStoreArgs& args, void* stream);

// ------------------------------------------------------------------ RoPE
struct RopeArgs {
  const uint16_t* q = nullptr;  // [T, Hq, D] bf16
  int64_t q_stride0 = 0, q_stride1 = 0, q_stride2 = 1;
  uint16_t* out = nullptr;  // [T, Hq, D] bf16
  int64_t out_stride0 = 0, out_stride1 = 0, out_stride2 = 1;
  int32_t T = 0, Hq = 0, D = 0;
  const float* freqs = nullptr;  // [max_seq_len, rope_dim], rows of stride freqs_stride0
  int64_t freqs_stride0 = 0;
  int32_t rope_dim = 0, rope_offset = 0;
  bool interleaved = true;
  const uint32_t* position_ids = nullptr;  // [T] or nullptr (cache positions)
  int64_t position_stride = 1;
  PagedRows cache;  // any dtype; K = kv index 0; scale_granularity below
  int64_t scale_granularity = 0;
  const uint32_t* offs = nullptr;  // [B + 1]
  int32_t batch = 0;
};
Status fused_qk_rope_ragged(const RopeArgs& args, void* stream);

}  // namespace quantkv::cuda::launch
