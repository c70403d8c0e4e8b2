// The DeepSeek-V3.2 "lightning indexer" (contract §3) and its companions (contract §5): the indexer
// K store and the Q prepare.
#pragma once

#include <cstdint>
#include <string_view>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/rope.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv {

struct EngineIndexerKCache;  // the engines' K cache layout (quantkv/engine_layout.hpp)

enum class MaskType : int { kNull = 0, kCausal = 1 };
// Accepts MAX's mask strings, case-insensitively: "null", "causal" (also "MaskName.CAUSAL",
// "no_mask", "none").
Status parse_mask(std::string_view text, MaskType* out);
const char* mask_name(MaskType mask);

// For every new token t of sequence b (row t = offs[b] + i), scores each visible key j,
//   score(t, j) = k_scale(j) * sum_h max(q[t,h,:] . k[j,:], 0) * q_s[t,h],
// and writes the positions of the min(top_k, key_bound) best, by score descending and
// position ascending, then -1. key_bound = causal ? cache_len[b] + i + 1 : cache_len[b] +
// seq_len[b]. `k_collection` is an e4m3 cache with num_heads 1, head_size D and one float scale per
// token; the K of the new tokens is already stored at cache_len[b] + i.
Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,  // [T, top_k]
                                       TensorView<const float8_e4m3fn, 3> q,   // [T, H, D]
                                       TensorView<const float, 2> q_s,         // [T, H]
                                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const Context& ctx);

// Where the time of one indexer call went (CPU backend), for benchmarks and the demo.
struct IndexerTimings {
  double score_seconds = 0;     // staging q, repacking K, computing the scores
  double topk_seconds = 0;      // selecting and ordering the top_k of every row
  int64_t chunks = 0;           // token chunks the scores budget required
  int64_t workspace_bytes = 0;  // extra memory used (score rows, staged q, thread scratch)
};
// As above, and fills `timings` (may be null).
Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,  // [T, top_k]
                                       TensorView<const float8_e4m3fn, 3> q,   // [T, H, D]
                                       TensorView<const float, 2> q_s,         // [T, H]
                                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const Context& ctx,
                                       IndexerTimings* timings);

// What the indexer writes for each selected key.
enum class IndexOutput : int {
  kPositions = 0,    // the key's position in its sequence (contract §3)
  kGlobalSlots = 1,  // page id * page_size + slot, FlashMLA's sparse-attention indices
};
const char* index_output_name(IndexOutput output);

// How per-token scales are chosen by the K store and the Q prepare.
enum class ScaleMode : int {
  kFloat = 0,       // s = amax / 448
  kPowerOfTwo = 1,  // s rounded up to a power of two (ue8m0), DeepSeek-V3.2's default
};

// Quantises new K rows per token (amax = max(max|x|, 1e-4), s = amax / 448, optionally rounded
// up to a power of two) and stores e4m3(x / s) at position cache_len[b] + i, with s in the
// scales tensor.
Status indexer_k_store(TensorView<const float, 2> k,                     // [T, D]
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const Context& ctx);
Status indexer_k_store(TensorView<const bfloat16, 2> k,                  // [T, D]
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const Context& ctx);

// q [T, H, D] and head weights [T, H] -> fp8 q with a per-(token, head) scale s (as the K
// store) and q_s = w * H^-0.5 * D^-0.5 * s.
Status indexer_q_prepare(TensorView<const float, 3> q,        // [T, H, D]
                         TensorView<const float, 2> weights,  // [T, H]
                         TensorView<float8_e4m3fn, 3> q_fp8,  // [T, H, D]
                         TensorView<float, 2> q_s,            // [T, H]
                         ScaleMode scale_mode, const Context& ctx);

// ----------------------------------------------------------------- front end
// DeepSeek-V3.2's indexer front end (inference/model.py, Indexer.forward): before act_quant, q
// and k get RoPE on part of each row and a Walsh-Hadamard rotation (rotate_activation). The
// overloads below taking an IndexerFrontEnd run, per row and in one pass:
//   load (bf16 or f32) -> RoPE -> [bf16] -> Hadamard -> [bf16] -> the quantisation above,
// where [bf16] is a rounding to bf16 (round to nearest even) of the whole row in kBf16Steps,
// the reference's points (apply_rotary_emb and hadamard_transform return bf16); kFloat32 keeps
// fp32 throughout. A step that is off is skipped with its rounding. docs/rope.md has the contract.
enum class HadamardMode : int {
  kNone = 0,
  kWalshHadamard =
      1,  // x -> H_D x * D^-0.5 (Sylvester order, radix-2 butterflies); D a power of two
};
enum class FrontEndRounding : int {
  kBf16Steps = 0,  // the reference's: each step's output rounded to bf16
  kFloat32 = 1,    // no intermediate rounding
};
struct IndexerFrontEnd {
  bool apply_rope = false;
  // freqs_cis, position_ids, layout, placement (RopeOptions). The Q prepare needs position_ids
  // (it sees no cache); the K store uses cache_len[b] + i when they are empty.
  RopeOptions rope;
  HadamardMode hadamard = HadamardMode::kNone;
  FrontEndRounding rounding = FrontEndRounding::kBf16Steps;
};
// DeepSeek-V3.2's choice: RoPE with half-split pairs on the leading freqs_cis.shape[1] (64)
// elements, the Walsh-Hadamard rotation, bf16 rounding points.
IndexerFrontEnd deepseek_v32_front_end(
    TensorView<const float, 2> freqs_cis,              // [max_seq_len, 64]
    TensorView<const uint32_t, 1> position_ids = {});  // [T] or empty

// The K store with the front end: k rows [T, D] (after the engine's LayerNorm) rotated, then
// quantised into the cache at cache_len[b] + i.
Status indexer_k_store(TensorView<const bfloat16, 2> k,                  // [T, D]
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const IndexerFrontEnd& front_end, const Context& ctx);
Status indexer_k_store(TensorView<const float, 2> k,                     // [T, D]
                       TensorView<const uint32_t, 1> input_row_offsets,  // [B + 1]
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const IndexerFrontEnd& front_end, const Context& ctx);

// The Q prepare with the front end (each head's row rotated before its quantisation).
Status indexer_q_prepare(TensorView<const bfloat16, 3> q,     // [T, H, D]
                         TensorView<const float, 2> weights,  // [T, H]
                         TensorView<float8_e4m3fn, 3> q_fp8,  // [T, H, D]
                         TensorView<float, 2> q_s,            // [T, H]
                         ScaleMode scale_mode, const IndexerFrontEnd& front_end,
                         const Context& ctx);
Status indexer_q_prepare(TensorView<const float, 3> q,        // [T, H, D]
                         TensorView<const float, 2> weights,  // [T, H]
                         TensorView<float8_e4m3fn, 3> q_fp8,  // [T, H, D]
                         TensorView<float, 2> q_s,            // [T, H]
                         ScaleMode scale_mode, const IndexerFrontEnd& front_end,
                         const Context& ctx);

// ----------------------------------------------------------------- one call per operation
// Each operation of this header (and of engine_layout.hpp) as one call whose optional parts are
// fields: the element type of the input (fp32 or bf16: exactly one view given), the cache (MAX's
// collection and a layer, or the engines' layout: exactly one pointer), the front end, the
// output form. The fixed-signature functions above are one-line wrappers of these, with the
// same bits. Views left empty and null pointers are the parts not used.

struct IndexerKStoreArgs {
  TensorView<const float, 2> k;                          // [T, D] fp32, or
  TensorView<const bfloat16, 2> k_bf16;                  // [T, D] bf16 (exactly one)
  TensorView<const uint32_t, 1> input_row_offsets;       // [B + 1]
  const PagedKVCacheCollection* k_collection = nullptr;  // MAX's cache (layer layer_idx), or
  uint32_t layer_idx = 0;
  const EngineIndexerKCache* k_cache = nullptr;  // the engines' layout (exactly one of the two)
  ScaleMode scale_mode = ScaleMode::kPowerOfTwo;
  const IndexerFrontEnd* front_end = nullptr;  // optional: rotate each row before quantising
};
Status indexer_k_store(const IndexerKStoreArgs& args, const Context& ctx);

struct IndexerQPrepareArgs {
  TensorView<const float, 3> q;          // [T, H, D] fp32, or
  TensorView<const bfloat16, 3> q_bf16;  // [T, H, D] bf16 (exactly one)
  TensorView<const float, 2> weights;    // [T, H]
  TensorView<float8_e4m3fn, 3> q_fp8;    // [T, H, D]
  TensorView<float, 2> q_s;              // [T, H]
  ScaleMode scale_mode = ScaleMode::kPowerOfTwo;
  const IndexerFrontEnd* front_end = nullptr;  // optional; needs rope.position_ids for RoPE
};
Status indexer_q_prepare(const IndexerQPrepareArgs& args, const Context& ctx);

struct MlaIndexerArgs {
  TensorView<int32_t, 2> output_indices;                 // [T, top_k]
  TensorView<const float8_e4m3fn, 3> q;                  // [T, H, D]
  TensorView<const float, 2> q_s;                        // [T, H]
  TensorView<const uint32_t, 1> input_row_offsets;       // [B + 1]
  const PagedKVCacheCollection* k_collection = nullptr;  // MAX's cache (layer layer_idx), or
  uint32_t layer_idx = 0;
  const EngineIndexerKCache* k_cache = nullptr;  // the engines' layout (exactly one of the two)
  MaskType mask = MaskType::kCausal;
  IndexOutput output = IndexOutput::kPositions;  // kGlobalSlots: num_blocks * page_size <= 2^31
  IndexerTimings* timings = nullptr;             // filled when not null
};
Status mla_indexer(const MlaIndexerArgs& args, const Context& ctx);

}  // namespace quantkv
