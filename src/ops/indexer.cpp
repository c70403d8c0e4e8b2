// The lightning indexer's entry point (SPEC §3): the shared validation (ops/validate.hpp, SPEC §6)
// and the CPU-only checks, then the CPU driver (src/cpu/indexer_driver.cpp). Nothing is written unless every check passes.
#include "quantkv/indexer.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/out_of_memory.hpp"
#include "cpu/indexer_driver.hpp"
#include "ops/validate.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string lower(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The indices are written while q, q_s and the cache are still being read.
Status check_output_aliasing(const TensorView<int32_t, 2>& out, const TensorView<const float8_e4m3fn, 3>& q,
                             const TensorView<const float, 2>& q_s, const TensorView<const uint32_t, 1>& offs,
                             const PagedKVCacheCollection& c) {
  return check_no_overlap(
      memory_range("output_indices", out),
      {memory_range("q", q), memory_range("k_collection.lookup_table", c.lookup_table),
       memory_range("k_collection.cache_lengths", c.cache_lengths), memory_range("q_s", q_s),
       memory_range("input_row_offsets", offs),
       memory_range("k_collection.blocks", c.blocks, c.total_elements() * int64_t(dtype_size(c.dtype))),
       memory_range("k_collection.scales", c.scales, c.total_scales() * int64_t(sizeof(float)))});
}

}  // namespace

Status parse_mask(std::string_view text, MaskType* out) {
  std::string s = lower(text);
  if (s.rfind("maskname.", 0) == 0) s = s.substr(9);
  if (s == "null" || s == "no_mask" || s == "none" || s == "nullmask") {
    *out = MaskType::kNull;
  } else if (s == "causal" || s == "causalmask") {
    *out = MaskType::kCausal;
  } else {
    return invalid_argument("mask: expected \"null\" or \"causal\", got \"" + std::string(text) + "\"");
  }
  return Status::Ok();
}

const char* mask_name(MaskType mask) {
  switch (mask) {
    case MaskType::kNull: return "null";
    case MaskType::kCausal: return "causal";
  }
  return "unknown";
}

namespace {
Status run_indexer_op(TensorView<int32_t, 2> output_indices, TensorView<const float8_e4m3fn, 3> q,
                      TensorView<const float, 2> q_s, TensorView<const uint32_t, 1> input_row_offsets,
                      const PagedKVCacheCollection& k_collection, uint32_t layer_idx, MaskType mask,
                      const Context& ctx, IndexerTimings* timings) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_indexer(output_indices, q, q_s, k_collection, layer_idx, mask));
  // From here on only the snapshot's lengths, pages and offsets are read.
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(k_collection, input_row_offsets, q.shape[0], /*require_pages=*/true,
                                                "input_row_offsets", "k_collection", &snap));
  QUANTKV_RETURN_IF_ERROR(check_output_aliasing(output_indices, q, q_s, input_row_offsets, k_collection));
  const PagedKVCacheCollection& cache = snap.cache;
  double row_keys = 0.0;  // sum over query rows of the keys they score (an upper bound if causal)
  for (int64_t b = 0; b < cache.batch_size(); ++b) {
    const int64_t rows = int64_t(snap.offsets(b + 1)) - int64_t(snap.offsets(b));
    const int64_t keys = int64_t(cache.cache_lengths(b)) + rows;
    row_keys += double(rows) * double(keys);
    if (keys > int64_t(INT32_MAX)) {
      return out_of_range("k_collection.cache_lengths: sequence " + str(b) + " has " + str(keys) +
                          " keys, expected <= 2^31-1 (int32 output indices)");
    }
  }
  if (ctx.num_threads < 0) {
    return invalid_argument("ctx.num_threads: expected >= 0, got " + str(ctx.num_threads));
  }
  // Scoring dominates: H * D multiply-adds per (row, key); top-k adds a few operations per key.
  const double work = row_keys * double(q.shape[1]) * double(q.shape[2]);
  cpu::IndexerArgs args{output_indices, q, q_s, snap.offsets, &cache, layer_idx, mask,
                        threads_for_work(ctx, work, kMinMacsPerThread)};
  cpu::IndexerPlan plan;
  QUANTKV_RETURN_IF_ERROR(cpu::plan_indexer(args, ctx.scores_budget_bytes, &plan));
  return cpu::run_indexer(args, plan, timings);
}
}  // namespace

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                                       MaskType mask, const Context& ctx, IndexerTimings* timings) {
  return catch_out_of_memory("mla_indexer_ragged_float8_paged", [&] {
    return run_indexer_op(output_indices, q, q_s, input_row_offsets, k_collection, layer_idx, mask, ctx, timings);
  });
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                                       MaskType mask, const Context& ctx) {
  return mla_indexer_ragged_float8_paged(output_indices, q, q_s, input_row_offsets, k_collection, layer_idx,
                                         mask, ctx, nullptr);
}

}  // namespace quantkv
