// The lightning indexer's entry point (contract §3): the shared validation (ops/validate.hpp,
// contract §6) and the CPU-only checks, then the CPU driver (src/cpu/indexer_driver.cpp). Nothing
// is written unless every check passes.
#include "quantkv/indexer.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/cache_snapshot.hpp"
#include "core/engine_layout_view.hpp"
#include "core/indexer_keys.hpp"
#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "core/view_checks.hpp"
#include "cpu/indexer_driver.hpp"
#include "ops/validate.hpp"
#include "quantkv/engine_layout.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string lower(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The indices are written while q, q_s, the offsets and the cache (its lengths and lookup
// table as the caller passed them, and its storage: one or two ranges, an empty range for
// none) are still being read.
Status check_output_aliasing(const TensorView<int32_t, 2>& out,
                             const TensorView<const float8_e4m3fn, 3>& q,
                             const TensorView<const float, 2>& q_s,
                             const TensorView<const uint32_t, 1>& offs,
                             const MemoryRange& cache_lengths, const MemoryRange& lookup_table,
                             const MemoryRange& storage, const MemoryRange& more_storage) {
  return check_no_overlap(
      memory_range("output_indices", out),
      {memory_range("q", q), lookup_table, cache_lengths, memory_range("q_s", q_s),
       memory_range("input_row_offsets", offs), storage, more_storage});
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
    return invalid_argument("mask: expected \"null\" or \"causal\", got \"" + std::string(text) +
                            "\"");
  }
  return Status::Ok();
}

const char* mask_name(MaskType mask) {
  switch (mask) {
    case MaskType::kNull:
      return "null";
    case MaskType::kCausal:
      return "causal";
  }
  return "unknown";
}

namespace {

// The checks both cache forms share once the arguments themselves are valid, on ONE snapshot
// of the offsets, cache lengths and lookup entries (`cache` describes the cache as a
// collection; `cache_name` names it in messages), then the CPU driver over `keys` with the
// snapshot's metadata: nothing the caller passed is read for lengths, pages or offsets again.
Status validate_and_run(TensorView<int32_t, 2> output_indices, TensorView<const float8_e4m3fn, 3> q,
                        TensorView<const float, 2> q_s,
                        TensorView<const uint32_t, 1> input_row_offsets,
                        const PagedKVCacheCollection& caller_cache, const char* cache_name,
                        detail::IndexerKeys keys, MaskType mask, const Context& ctx,
                        const IndexerOptions& options) {
  const std::string n(cache_name);
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(caller_cache, input_row_offsets, q.shape[0],
                                                /*require_pages=*/true, "input_row_offsets",
                                                cache_name, &snap));
  const PagedKVCacheCollection& cache = snap.cache;
  keys.cache_lengths = cache.cache_lengths;
  keys.lookup_table = cache.lookup_table;
  double row_keys = 0.0;  // sum over query rows of the keys they score (an upper bound if causal)
  for (int64_t b = 0; b < cache.batch_size(); ++b) {
    const int64_t rows = int64_t(snap.offsets(b + 1)) - int64_t(snap.offsets(b));
    const int64_t keys_b = int64_t(cache.cache_lengths(b)) + rows;
    row_keys += double(rows) * double(keys_b);
    if (keys_b > int64_t(INT32_MAX)) {
      return out_of_range(n + ".cache_lengths: sequence " + str(b) + " has " + str(keys_b) +
                          " keys, expected <= 2^31-1 (int32 output indices)");
    }
  }
  // Scoring dominates: H * D multiply-adds per (row, key); top-k adds a few operations per key.
  const double work = row_keys * double(q.shape[1]) * double(q.shape[2]);
  cpu::IndexerArgs args{output_indices,
                        q,
                        q_s,
                        snap.offsets,
                        keys,
                        mask,
                        options.output,
                        threads_for_work(ctx, work, kMinMacsPerThread)};
  cpu::IndexerPlan plan;
  QUANTKV_RETURN_IF_ERROR(cpu::plan_indexer(args, ctx.scores_budget_bytes, &plan));
  return cpu::run_indexer(args, plan, options.timings);
}

}  // namespace

Status mla_indexer(const MlaIndexerArgs& a, const Context& ctx) {
  return run_entry_point("mla_indexer_ragged_float8_paged", ctx, [&]() -> Status {
    if ((a.k_collection != nullptr) == (a.k_cache != nullptr)) {
      return invalid_argument(
          std::string("k_collection, k_cache: expected exactly one of MAX's cache collection and "
                      "the engines' cache, got ") +
          (a.k_cache != nullptr ? "both" : "neither"));
    }
    const IndexerOptions options{a.output, a.timings};
    if (a.k_collection != nullptr) {
      const PagedKVCacheCollection& c = *a.k_collection;
      QUANTKV_RETURN_IF_ERROR(
          ops::validate_indexer(a.output_indices, a.q, a.q_s, c, a.layer_idx, a.mask));
      // Before the aliasing checks: they span num_blocks pages, which this bounds.
      QUANTKV_RETURN_IF_ERROR(
          validate_index_output(a.output, c.num_blocks, c.page_size, "k_collection"));
      QUANTKV_RETURN_IF_ERROR(
          check_output_aliasing(a.output_indices, a.q, a.q_s, a.input_row_offsets,
                                memory_range("k_collection.cache_lengths", c.cache_lengths),
                                memory_range("k_collection.lookup_table", c.lookup_table),
                                memory_range("k_collection.blocks", c.blocks,
                                             c.total_elements() * int64_t(dtype_size(c.dtype))),
                                memory_range("k_collection.scales", c.scales,
                                             c.total_scales() * int64_t(sizeof(float)))));
      return validate_and_run(a.output_indices, a.q, a.q_s, a.input_row_offsets, c, "k_collection",
                              detail::indexer_keys(c, a.layer_idx), a.mask, ctx, options);
    }
    const EngineIndexerKCache& c = *a.k_cache;
    QUANTKV_RETURN_IF_ERROR(ops::validate_indexer(a.output_indices, a.q, a.q_s, c, a.mask));
    QUANTKV_RETURN_IF_ERROR(validate_index_output(a.output, c.num_blocks, c.page_size, "k_cache"));
    QUANTKV_RETURN_IF_ERROR(check_output_aliasing(
        a.output_indices, a.q, a.q_s, a.input_row_offsets,
        memory_range("k_cache.cache_lengths", c.cache_lengths),
        memory_range("k_cache.lookup_table", c.lookup_table),
        memory_range("k_cache.data", c.data, c.num_blocks * c.page_bytes()), MemoryRange{}));
    return validate_and_run(a.output_indices, a.q, a.q_s, a.input_row_offsets,
                            detail::as_collection(c), "k_cache", detail::indexer_keys(c), a.mask,
                            ctx, options);
  });
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const Context& ctx,
                                       const IndexerOptions& options) {
  return mla_indexer({output_indices, q, q_s, input_row_offsets, &k_collection, layer_idx, nullptr,
                      mask, options.output, options.timings},
                     ctx);
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const EngineIndexerKCache& k_cache, MaskType mask,
                                       const Context& ctx, const IndexerOptions& options) {
  return mla_indexer({output_indices, q, q_s, input_row_offsets, nullptr, 0, &k_cache, mask,
                      options.output, options.timings},
                     ctx);
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const Context& ctx,
                                       IndexerTimings* timings) {
  return mla_indexer({output_indices, q, q_s, input_row_offsets, &k_collection, layer_idx, nullptr,
                      mask, IndexOutput::kPositions, timings},
                     ctx);
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const Context& ctx) {
  return mla_indexer({output_indices, q, q_s, input_row_offsets, &k_collection, layer_idx, nullptr,
                      mask, IndexOutput::kPositions, nullptr},
                     ctx);
}

}  // namespace quantkv
