// Internal: the CPU lightning indexer's work plan and driver (the arguments are validated by
// src/ops/indexer.cpp before any of this runs).
//
// Per chunk of consecutive tokens whose score rows fit the budget:
//  1. stage q as bf16 (exact) and q_s contiguously;
//  2. score: work items = (sequence, tile of kIndexerKeyTile keys, the chunk's tokens of that
//     sequence that see the tile); each item repacks its K tile once and computes every score
//     of the tile completely (all of D, all heads), so no result depends on how items are
//     spread over threads; causally masked tiles are never generated. The rows of one
//     sequence share its items: MTP decode (next_n rows per sequence) reads and repacks each
//     K tile once for all next_n rows (docs/indexer.md, "MTP");
//  3. top-k of each score row, rows spread over threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/indexer_keys.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::cpu {

struct IndexerArgs {
  TensorView<int32_t, 2> output;          // [T, top_k]
  TensorView<const float8_e4m3fn, 3> q;   // [T, H, D], D contiguous
  TensorView<const float, 2> q_s;         // [T, H]
  TensorView<const uint32_t, 1> offsets;  // [B + 1]
  quantkv::detail::IndexerKeys keys;
  MaskType mask = MaskType::kNull;
  IndexOutput output_form = IndexOutput::kPositions;
  int num_threads = 1;
};

struct IndexerPlan {
  std::vector<int32_t> row_seq;      // [T] sequence of each row
  std::vector<int64_t> key_bound;    // [T] visible keys of each row
  std::vector<int64_t> chunk_begin;  // row where each chunk starts, then T
  std::size_t workspace_bytes = 0;   // the largest chunk's shared workspace
  std::size_t per_thread_bytes = 0;  // scratch of one thread
  std::size_t fixed_bytes = 0;       // all threads' scratch and the plan's own arrays
};

// One score item: the tile of keys [key_begin, key_begin + kIndexerKeyTile) of sequence `seq`
// against its rows [row_begin, row_end) (global row indices) of the chunk, the rows that see
// at least one key of the tile.
struct IndexerWorkItem {
  int32_t seq;
  int64_t key_begin;
  int64_t row_begin;
  int64_t row_end;
};

// The score items of the chunk of rows [r0, r1), per sequence one per key tile up to the
// sequence's largest bound. Fills `items` within its reserved capacity (the driver calls it
// inside its parallel region; the tests call it to check the schedule).
void make_indexer_items(const IndexerPlan& plan, int64_t r0, int64_t r1,
                        std::vector<IndexerWorkItem>* items);

// Splits the rows into chunks whose workspace, with every thread's scratch, fits `budget`.
// Fails with kResourceExhausted (naming scores_budget_bytes) when one row alone does not fit.
Status plan_indexer(const IndexerArgs& args, std::size_t budget, IndexerPlan* plan);

// Scores and selects; writes every element of `args.output`. Fails (kResourceExhausted,
// nothing written) only when the planned memory cannot be allocated.
Status run_indexer(const IndexerArgs& args, const IndexerPlan& plan, IndexerTimings* timings);

}  // namespace quantkv::cpu
