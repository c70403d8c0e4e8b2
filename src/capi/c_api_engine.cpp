// The C API (include/quantkv/quantkv.h), part 3: the indexer K cache in the engines' layout,
// the global-slot output, and int32 offsets / block tables (read as uint32: a negative entry
// is >= 2^31, a sentinel in a block table and rejected in offsets).
#include <string>
#include <type_traits>

#include "c_api_internal.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/quantkv.h"

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

namespace {

std::string str(int64_t v) { return std::to_string(v); }

struct IndexerViews {
  TensorView<int32_t, 2> out;
  TensorView<const float8_e4m3fn, 3> q;
  TensorView<const float, 2> q_s;
  TensorView<const uint32_t, 1> offs;
  IndexerOptions options;
};

Status offsets_view(const quantkv_tensor_t* offs, TensorView<const uint32_t, 1>* out) {
  return to_view(offs, "input_row_offsets", "[B + 1]", {QUANTKV_DTYPE_U32, QUANTKV_DTYPE_I32}, out);
}

Status indexer_views(const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q,
                     const quantkv_tensor_t* q_s, const quantkv_tensor_t* offs, quantkv_mask_t mask,
                     quantkv_index_output_t index_output, IndexerViews* v) {
  QUANTKV_RETURN_IF_ERROR(check_enum("mask", mask, QUANTKV_MASK_CAUSAL));
  QUANTKV_RETURN_IF_ERROR(check_enum("index_output", index_output, QUANTKV_INDEX_GLOBAL_SLOTS));
  QUANTKV_RETURN_IF_ERROR(
      to_view(output_indices, "output_indices", "[T, top_k]", {QUANTKV_DTYPE_I32}, &v->out));
  QUANTKV_RETURN_IF_ERROR(
      to_view(q, "q", "[T, H, D]", {QUANTKV_DTYPE_E4M3, QUANTKV_DTYPE_U8}, &v->q));
  QUANTKV_RETURN_IF_ERROR(to_view(q_s, "q_s", "[T, H]", {QUANTKV_DTYPE_F32}, &v->q_s));
  QUANTKV_RETURN_IF_ERROR(offsets_view(offs, &v->offs));
  v->options.output = static_cast<IndexOutput>(index_output);
  return Status::Ok();
}

// The C engine cache as the library's (pointer and dtype checks here, the rest in
// validate_engine_k_cache inside the operation).
Status to_engine_cache(const quantkv_engine_k_cache_t* c, EngineIndexerKCache* out) {
  if (c == nullptr) return invalid_argument("k_cache: pointer is null");
  if (c->block_table_dtype != QUANTKV_DTYPE_U32 && c->block_table_dtype != QUANTKV_DTYPE_I32) {
    return invalid_argument(
        std::string("k_cache.block_table_dtype: expected uint32 or int32, got ") +
        quantkv_dtype_name(c->block_table_dtype));
  }
  if (c->batch_size < 0 || c->max_pages_per_seq < 0) {
    return invalid_argument("k_cache: expected batch_size >= 0 and max_pages_per_seq >= 0, got " +
                            str(c->batch_size) + " and " + str(c->max_pages_per_seq));
  }
  if (c->batch_size > 0 && c->cache_lengths == nullptr) {
    return invalid_argument("k_cache.cache_lengths: data pointer is null");
  }
  if (c->batch_size > 0 && c->max_pages_per_seq > 0 && c->block_table == nullptr) {
    return invalid_argument("k_cache.lookup_table: data pointer is null");
  }
  out->data = c->data;
  out->num_blocks = c->num_blocks;
  out->page_size = c->page_size;
  out->head_size = c->head_size;
  out->page_stride_bytes = c->page_stride_bytes;
  out->format = static_cast<IndexKFormat>(c->format);  // an unknown value: k_cache.format error
  out->global_scale = c->global_scale;
  out->cache_lengths = make_view(c->cache_lengths, c->batch_size);
  out->lookup_table =
      make_view(static_cast<const uint32_t*>(c->block_table), c->batch_size, c->max_pages_per_seq);
  return Status::Ok();
}

// The one calls' cache: exactly one of MAX's collection and the engines' layout, converted
// into `storage` and pointed to by the call's `k_collection` or `k_cache`.
struct CacheStorage {
  PagedKVCacheCollection collection;
  EngineIndexerKCache engine;
};
Status select_cache(const quantkv_paged_kv_t* collection, const quantkv_engine_k_cache_t* engine,
                    CacheStorage* storage, const PagedKVCacheCollection** collection_out,
                    const EngineIndexerKCache** engine_out) {
  if ((collection != nullptr) == (engine != nullptr)) {
    return invalid_argument(
        std::string("k_collection, k_cache: expected exactly one of MAX's cache collection and "
                    "the engines' cache, got ") +
        (engine != nullptr ? "both" : "neither"));
  }
  if (collection != nullptr) {
    *collection_out = &storage->collection;
    return to_collection(collection, "k_collection", &storage->collection);
  }
  *engine_out = &storage->engine;
  return to_engine_cache(engine, &storage->engine);
}

// The optional front end, converted into `storage` (`out` stays null without one).
Status optional_front_end(const quantkv_indexer_front_end_t* fe, IndexerFrontEnd* storage,
                          const IndexerFrontEnd** out) {
  if (fe == nullptr) return Status::Ok();
  *out = storage;
  return to_front_end(fe, storage);
}

// Sets whichever of `f32` / `bf16` has the element type of `view` (with_float_or_bf16's).
template <typename View, typename F32, typename Bf16>
void set_float_or_bf16(View view, F32* f32, Bf16* bf16) {
  if constexpr (std::is_same_v<typename View::element_type, const bfloat16>) {
    *bf16 = view;
  } else {
    *f32 = view;
  }
}

}  // namespace

extern "C" {

quantkv_status_t quantkv_mla_indexer_ragged_float8_paged_output(
    const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q, const quantkv_tensor_t* q_s,
    const quantkv_tensor_t* input_row_offsets, const quantkv_paged_kv_t* k_collection,
    uint32_t layer_idx, quantkv_mask_t mask, quantkv_index_output_t index_output,
    const quantkv_context_t* ctx) {
  return guarded([&] {
    IndexerViews v;
    QUANTKV_RETURN_IF_ERROR(
        indexer_views(output_indices, q, q_s, input_row_offsets, mask, index_output, &v));
    PagedKVCacheCollection cache;
    QUANTKV_RETURN_IF_ERROR(to_collection(k_collection, "k_collection", &cache));
    return mla_indexer_ragged_float8_paged(v.out, v.q, v.q_s, v.offs, cache, layer_idx,
                                           static_cast<MaskType>(mask), to_context(ctx), v.options);
  });
}

quantkv_status_t quantkv_mla_indexer_ragged_float8_paged_engine(
    const quantkv_tensor_t* output_indices, const quantkv_tensor_t* q, const quantkv_tensor_t* q_s,
    const quantkv_tensor_t* input_row_offsets, const quantkv_engine_k_cache_t* k_cache,
    quantkv_mask_t mask, quantkv_index_output_t index_output, const quantkv_context_t* ctx) {
  return guarded([&] {
    IndexerViews v;
    QUANTKV_RETURN_IF_ERROR(
        indexer_views(output_indices, q, q_s, input_row_offsets, mask, index_output, &v));
    EngineIndexerKCache cache;
    QUANTKV_RETURN_IF_ERROR(to_engine_cache(k_cache, &cache));
    return mla_indexer_ragged_float8_paged(v.out, v.q, v.q_s, v.offs, cache,
                                           static_cast<MaskType>(mask), to_context(ctx), v.options);
  });
}

quantkv_status_t quantkv_indexer_k_store_engine(const quantkv_tensor_t* k,
                                                const quantkv_tensor_t* input_row_offsets,
                                                const quantkv_engine_k_cache_t* k_cache,
                                                quantkv_scale_mode_t scale_mode,
                                                const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    TensorView<const uint32_t, 1> offs;
    QUANTKV_RETURN_IF_ERROR(offsets_view(input_row_offsets, &offs));
    EngineIndexerKCache cache;
    QUANTKV_RETURN_IF_ERROR(to_engine_cache(k_cache, &cache));
    const Context c = to_context(ctx);
    return with_float_or_bf16<2>(k, "k", "[T, D]", [&](auto view) {
      return indexer_k_store(view, offs, cache, static_cast<ScaleMode>(scale_mode), c);
    });
  });
}

quantkv_status_t quantkv_indexer_k_store_call(const quantkv_indexer_k_store_args_t* args,
                                              const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (args == nullptr) return invalid_argument("args: pointer is null");
    const quantkv_indexer_k_store_args_t& a = *args;
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", a.scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    IndexerKStoreArgs call;
    call.layer_idx = a.layer_idx;
    call.scale_mode = static_cast<ScaleMode>(a.scale_mode);
    CacheStorage cache;
    QUANTKV_RETURN_IF_ERROR(
        select_cache(a.k_collection, a.k_cache, &cache, &call.k_collection, &call.k_cache));
    QUANTKV_RETURN_IF_ERROR(offsets_view(a.input_row_offsets, &call.input_row_offsets));
    IndexerFrontEnd fe;
    QUANTKV_RETURN_IF_ERROR(optional_front_end(a.front_end, &fe, &call.front_end));
    const Context c = to_context(ctx);
    return with_float_or_bf16<2>(a.k, "k", "[T, D]", [&](auto view) {
      set_float_or_bf16(view, &call.k, &call.k_bf16);
      return indexer_k_store(call, c);
    });
  });
}

quantkv_status_t quantkv_indexer_q_prepare_call(const quantkv_indexer_q_prepare_args_t* args,
                                                const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (args == nullptr) return invalid_argument("args: pointer is null");
    const quantkv_indexer_q_prepare_args_t& a = *args;
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", a.scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    IndexerQPrepareArgs call;
    call.scale_mode = static_cast<ScaleMode>(a.scale_mode);
    QUANTKV_RETURN_IF_ERROR(
        to_view(a.weights, "weights", "[T, H]", {QUANTKV_DTYPE_F32}, &call.weights));
    QUANTKV_RETURN_IF_ERROR(to_view(a.q_fp8, "q_fp8", "[T, H, D]",
                                    {QUANTKV_DTYPE_E4M3, QUANTKV_DTYPE_U8}, &call.q_fp8));
    QUANTKV_RETURN_IF_ERROR(to_view(a.q_s, "q_s", "[T, H]", {QUANTKV_DTYPE_F32}, &call.q_s));
    IndexerFrontEnd fe;
    QUANTKV_RETURN_IF_ERROR(optional_front_end(a.front_end, &fe, &call.front_end));
    const Context c = to_context(ctx);
    return with_float_or_bf16<3>(a.q, "q", "[T, H, D]", [&](auto view) {
      set_float_or_bf16(view, &call.q, &call.q_bf16);
      return indexer_q_prepare(call, c);
    });
  });
}

quantkv_status_t quantkv_mla_indexer_call(const quantkv_mla_indexer_args_t* args,
                                          const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (args == nullptr) return invalid_argument("args: pointer is null");
    const quantkv_mla_indexer_args_t& a = *args;
    IndexerViews v;
    QUANTKV_RETURN_IF_ERROR(indexer_views(a.output_indices, a.q, a.q_s, a.input_row_offsets, a.mask,
                                          a.index_output, &v));
    MlaIndexerArgs call;
    call.output_indices = v.out;
    call.q = v.q;
    call.q_s = v.q_s;
    call.input_row_offsets = v.offs;
    call.layer_idx = a.layer_idx;
    call.mask = static_cast<MaskType>(a.mask);
    call.output = v.options.output;
    CacheStorage cache;
    QUANTKV_RETURN_IF_ERROR(
        select_cache(a.k_collection, a.k_cache, &cache, &call.k_collection, &call.k_cache));
    IndexerTimings timings;
    if (a.timings != nullptr) call.timings = &timings;
    QUANTKV_RETURN_IF_ERROR(mla_indexer(call, to_context(ctx)));
    if (a.timings != nullptr) {
      *a.timings = {timings.score_seconds, timings.topk_seconds, timings.chunks,
                    timings.workspace_bytes};
    }
    return Status::Ok();
  });
}

}  // extern "C"
