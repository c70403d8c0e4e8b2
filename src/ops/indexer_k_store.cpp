// Indexer K store (contract §5): new K rows [T, D] are quantised per token to e4m3 with one float
// scale and written at position cache_len[b] + i of the indexer's paged K cache.
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cache_snapshot.hpp"
#include "core/engine_layout_view.hpp"
#include "core/indexer_keys.hpp"
#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "core/view_checks.hpp"
#include "cpu/indexer_front_end.hpp"
#include "cpu/indexer_mxfp4.hpp"
#include "cpu/indexer_quantize.hpp"
#include "cpu/kernels.hpp"
#include "ops/ragged_tokens.hpp"
#include "ops/rope_options.hpp"
#include "ops/validate.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {
namespace {

// The shared checks, the front end's, then one snapshot of the ragged metadata (validated,
// then the only copy read) and the aliasing of the written blocks and scales.
template <typename Elem>
Status validate_store(const TensorView<const Elem, 2>& k, const TensorView<const uint32_t, 1>& offs,
                      const PagedKVCacheCollection& c, uint32_t layer_idx, ScaleMode mode,
                      const IndexerFrontEnd* fe, CacheSnapshot* snap) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_k_store(k, c, layer_idx, mode));
  if (fe != nullptr) {
    QUANTKV_RETURN_IF_ERROR(detail::validate_front_end(*fe, k.shape[0], k.shape[1], false));
  }
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(c, offs, k.shape[0], /*require_pages=*/true,
                                                "input_row_offsets", "k_collection", snap));
  if (fe != nullptr && fe->apply_rope) {
    QUANTKV_RETURN_IF_ERROR(detail::validate_rope_cache_positions(fe->rope, snap->cache,
                                                                  snap->offsets, "front_end.rope"));
  }
  // The codes and scales are written while k and the metadata are read.
  const MemoryRange blocks = memory_range("k_collection.blocks", c.blocks,
                                          c.total_elements() * int64_t(dtype_size(c.dtype)));
  const MemoryRange scales =
      memory_range("k_collection.scales", c.scales, c.total_scales() * int64_t(sizeof(float)));
  for (const MemoryRange& written : {blocks, scales}) {
    QUANTKV_RETURN_IF_ERROR(
        check_no_overlap(written, {memory_range("k", k), memory_range("input_row_offsets", offs),
                                   memory_range("k_collection.cache_lengths", c.cache_lengths),
                                   memory_range("k_collection.lookup_table", c.lookup_table)}));
  }
  return check_no_overlap(blocks, {scales});
}
// The engine buffer likewise: one snapshot, and the buffer (codes and scales, written) must
// not overlap k or the metadata.
template <typename Elem>
Status validate_store(const TensorView<const Elem, 2>& k, const TensorView<const uint32_t, 1>& offs,
                      const EngineIndexerKCache& c, ScaleMode mode, const IndexerFrontEnd* fe,
                      CacheSnapshot* snap) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_k_store(k, c, mode));
  if (fe != nullptr) {
    QUANTKV_RETURN_IF_ERROR(detail::validate_front_end(*fe, k.shape[0], k.shape[1], false));
  }
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(detail::as_collection(c), offs, k.shape[0],
                                                /*require_pages=*/true, "input_row_offsets",
                                                "k_cache", snap));
  if (fe != nullptr && fe->apply_rope) {
    QUANTKV_RETURN_IF_ERROR(detail::validate_rope_cache_positions(fe->rope, snap->cache,
                                                                  snap->offsets, "front_end.rope"));
  }
  return check_no_overlap(memory_range("k_cache.data", c.data, c.num_blocks * c.page_bytes()),
                          {memory_range("k", k), memory_range("input_row_offsets", offs),
                           memory_range("k_cache.cache_lengths", c.cache_lengths),
                           memory_range("k_cache.lookup_table", c.lookup_table)});
}

// The vector row kernel for Elem on this CPU, or null (scalar path) when rows are strided.
template <typename Elem>
auto vector_kernel(bool unit_stride) {
  if constexpr (std::is_same_v<Elem, bfloat16>) {
    return unit_stride ? cpu::kernels().quantize.token_bf16 : nullptr;
  } else {
    return unit_stride ? cpu::kernels().quantize.token_f32 : nullptr;
  }
}

// The fp4 forms' row (codes and block scales of (page, slot)) from load(d); false for the fp8
// form, which the callers store themselves.
template <typename Load>
bool store_fp4_row(const detail::IndexerKeys& c, Load load, int64_t D, int64_t page, int64_t slot) {
  if (c.format == IndexKFormat::kMxfp4) {
    cpu::quantize_row_mxfp4(load, D, c.key_row(page, slot), c.scale_bytes(page, slot));
    return true;
  }
  if (c.format == IndexKFormat::kNvfp4) {
    cpu::quantize_row_nvfp4(load, D, c.global_scale, c.key_row(page, slot),
                            c.scale_bytes(page, slot));
    return true;
  }
  return false;
}

// Quantises row t of k into the key row and scale of its position (validated before; `offs`
// and the lengths and lookup table of `c` are the snapshot's). Allocates before its parallel
// region only.
template <typename Elem, typename ToFloat>
void store_rows(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs,
                const detail::IndexerKeys& c, const Context& ctx, ScaleMode mode,
                ToFloat to_float) {
  const int64_t T = k.shape[0], D = k.shape[1];
  const std::vector<int32_t> seq = row_to_sequence(offs);
  const auto fast = vector_kernel<Elem>(D <= 1 || k.strides[1] == 1);
  using Raw = std::conditional_t<std::is_same_v<Elem, bfloat16>, uint16_t, float>;
  // Streaming: each row is read once and its codes written once.
  const int threads = threads_for_work(ctx, double(T) * double(D) * (double(sizeof(Elem)) + 1.0),
                                       kMinBytesPerThread);
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const int32_t b = seq[t];
    const int64_t pos = int64_t(c.cache_lengths(b)) + t - int64_t(offs(b));
    const int64_t page = c.page_of(b, pos), slot = pos % c.page_size;
    uint8_t* dst = c.key_row(page, slot);
    if (store_fp4_row(
            c, [&](int64_t d) { return to_float(k(t, d)); }, D, page, slot))
      continue;
    const float s =
        fast != nullptr
            ? fast(reinterpret_cast<const Raw*>(k.data + t * k.strides[0]), D, mode, dst)
            : cpu::quantize_row([&](int64_t d) { return to_float(k(t, d)); }, D, mode, dst);
    std::memcpy(c.scale_bytes(page, slot), &s, sizeof(float));
  }
}

// The keys of the caller's cache with the snapshot's lengths and lookup table.
detail::IndexerKeys with_snapshot(detail::IndexerKeys keys, const CacheSnapshot& snap) {
  keys.cache_lengths = snap.cache.cache_lengths;
  keys.lookup_table = snap.cache.lookup_table;
  return keys;
}

// The front-end path: each row loaded to fp32, rotated (RoPE at the token's position, Hadamard)
// and quantised into the cache (`c` and `offs` are the snapshot's; `keys` address the caller's
// storage through the snapshot's metadata).
template <typename Elem, typename ToFloat>
void store_front_end(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs,
                     const PagedKVCacheCollection& c, const detail::IndexerKeys& keys,
                     ScaleMode mode, const IndexerFrontEnd& fe, const Context& ctx,
                     ToFloat to_float) {
  const int64_t T = k.shape[0], D = k.shape[1];
  const cpu::FrontEndPlan plan = cpu::make_front_end_plan(fe, D);
  const int threads = threads_for_work(ctx, double(T) * double(D) * (double(sizeof(Elem)) + 1.0),
                                       kMinBytesPerThread);
  detail::for_each_new_token(
      c, offs, threads, D, [&](int64_t t, int64_t b, int64_t pos, float* row) {
        const int64_t page = c.page_of(b, pos), slot = pos % c.page_size;
        for (int64_t d = 0; d < D; ++d) row[d] = to_float(k(t, d));
        const float* cs = fe.apply_rope ? detail::rope_table_row(fe.rope, t, pos) : nullptr;
        if (keys.format != IndexKFormat::kFp8) {
          cpu::front_end_rotate_row(plan, row, D, cs);
          store_fp4_row(
              keys, [&](int64_t d) { return row[d]; }, D, page, slot);
          return;
        }
        const float s =
            cpu::front_end_quantize_row(plan, row, D, cs, mode, keys.key_row(page, slot));
        std::memcpy(keys.scale_bytes(page, slot), &s, sizeof(float));
      });
}

// Either cache form, with or without the front end: validated on one snapshot, then the rows
// (`a`'s k views are ignored: `k` is the one given).
template <typename Elem, typename ToFloat>
Status store(TensorView<const Elem, 2> k, const IndexerKStoreArgs& a, const Context& ctx,
             ToFloat to_float) {
  CacheSnapshot snap;
  detail::IndexerKeys keys;
  if (a.k_collection != nullptr) {
    QUANTKV_RETURN_IF_ERROR(validate_store(k, a.input_row_offsets, *a.k_collection, a.layer_idx,
                                           a.scale_mode, a.front_end, &snap));
    keys = with_snapshot(detail::indexer_keys(*a.k_collection, a.layer_idx), snap);
  } else {
    QUANTKV_RETURN_IF_ERROR(
        validate_store(k, a.input_row_offsets, *a.k_cache, a.scale_mode, a.front_end, &snap));
    keys = with_snapshot(detail::indexer_keys(*a.k_cache), snap);
  }
  if (a.front_end != nullptr) {
    store_front_end(k, snap.offsets, snap.cache, keys, a.scale_mode, *a.front_end, ctx, to_float);
  } else {
    store_rows(k, snap.offsets, keys, ctx, a.scale_mode, to_float);
  }
  return Status::Ok();
}

float bf16_value(bfloat16 x) { return bf16_to_float(x.bits); }
float f32_value(float x) { return x; }

// The one-call arguments of a fixed form (k in the field of its type), for the wrappers below.
template <typename Elem>
IndexerKStoreArgs fixed_args(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs,
                             ScaleMode mode, const IndexerFrontEnd* fe) {
  IndexerKStoreArgs a;
  if constexpr (std::is_same_v<Elem, bfloat16>) {
    a.k_bf16 = k;
  } else {
    a.k = k;
  }
  a.input_row_offsets = offs;
  a.scale_mode = mode;
  a.front_end = fe;
  return a;
}
IndexerKStoreArgs into(IndexerKStoreArgs a, const PagedKVCacheCollection& c, uint32_t layer) {
  a.k_collection = &c;
  a.layer_idx = layer;
  return a;
}
IndexerKStoreArgs into(IndexerKStoreArgs a, const EngineIndexerKCache& c) {
  a.k_cache = &c;
  return a;
}

}  // namespace

Status indexer_k_store(const IndexerKStoreArgs& a, const Context& ctx) {
  return run_entry_point("indexer_k_store", ctx, [&]() -> Status {
    const bool f32 = given(a.k), bf16 = given(a.k_bf16);
    if (f32 == bf16) {
      return invalid_argument(std::string("k, k_bf16: expected exactly one of the fp32 and the "
                                          "bf16 keys, got ") +
                              (f32 ? "both" : "neither"));
    }
    if ((a.k_collection != nullptr) == (a.k_cache != nullptr)) {
      return invalid_argument(
          std::string("k_collection, k_cache: expected exactly one of MAX's cache collection and "
                      "the engines' cache, got ") +
          (a.k_cache != nullptr ? "both" : "neither"));
    }
    return f32 ? store(a.k, a, ctx, f32_value) : store(a.k_bf16, a, ctx, bf16_value);
  });
}

Status indexer_k_store(TensorView<const float, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const Context& ctx) {
  return indexer_k_store(
      into(fixed_args(k, input_row_offsets, scale_mode, nullptr), k_collection, layer_idx), ctx);
}

Status indexer_k_store(TensorView<const bfloat16, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const Context& ctx) {
  return indexer_k_store(
      into(fixed_args(k, input_row_offsets, scale_mode, nullptr), k_collection, layer_idx), ctx);
}

Status indexer_k_store(TensorView<const float, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const IndexerFrontEnd& front_end, const Context& ctx) {
  return indexer_k_store(
      into(fixed_args(k, input_row_offsets, scale_mode, &front_end), k_collection, layer_idx), ctx);
}

Status indexer_k_store(TensorView<const bfloat16, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const IndexerFrontEnd& front_end, const Context& ctx) {
  return indexer_k_store(
      into(fixed_args(k, input_row_offsets, scale_mode, &front_end), k_collection, layer_idx), ctx);
}

Status indexer_k_store(TensorView<const float, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const Context& ctx) {
  return indexer_k_store(into(fixed_args(k, input_row_offsets, scale_mode, nullptr), k_cache), ctx);
}

Status indexer_k_store(TensorView<const bfloat16, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const Context& ctx) {
  return indexer_k_store(into(fixed_args(k, input_row_offsets, scale_mode, nullptr), k_cache), ctx);
}

}  // namespace quantkv
