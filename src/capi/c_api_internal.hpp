// Shared by the C API translation units: the exception guard that turns every call into a
// status code plus a per-thread message, and the conversions from the C structs to the
// library's typed views (validated, with messages naming the argument).
#pragma once

#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantkv.h"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

// The opaque prepared weights of the C API (c_api_ops.cpp, c_api_checkpoint.cpp).
struct quantkv_prepared_qkv_weights {
  quantkv::PreparedQkvWeights weights;
};

namespace quantkv::capi {

// Records `status` as this thread's last error (cleared on success) and returns its code.
quantkv_status_t finish(const Status& status);

// Runs `fn` (returning a Status) so that no exception leaves: bad_alloc becomes
// RESOURCE_EXHAUSTED, anything else INTERNAL, with the exception's text as the message.
template <typename Fn>
quantkv_status_t guarded(Fn&& fn) noexcept {
  try {
    return finish(fn());
  } catch (const std::bad_alloc&) {
    return finish({StatusCode::kResourceExhausted, "out of memory"});
  } catch (const std::exception& e) {
    return finish({StatusCode::kInternal, std::string("unexpected exception: ") + e.what()});
  } catch (...) {
    return finish({StatusCode::kInternal, "unexpected non-standard exception"});
  }
}

// Checks pointer, dtype (one of `accepted`) and rank of a C tensor. `dims` names the
// dimensions for messages, e.g. "[T, H, D]".
Status check_tensor(const quantkv_tensor_t* t, const char* name, const char* dims, int rank,
                    std::initializer_list<quantkv_dtype_t> accepted);

// A typed view of a checked C tensor (shape/stride validation is the library's job).
template <typename T, int Rank>
Status to_view(const quantkv_tensor_t* t, const char* name, const char* dims,
               std::initializer_list<quantkv_dtype_t> accepted, TensorView<T, Rank>* out) {
  QUANTKV_RETURN_IF_ERROR(check_tensor(t, name, dims, Rank, accepted));
  out->data = static_cast<T*>(t->data);
  for (int d = 0; d < Rank; ++d) {
    out->shape[d] = t->shape[d];
    out->strides[d] = t->strides[d];
  }
  return Status::Ok();
}

// Runs `fn(view)` with x as a float32 or bf16 view of rank `Rank`: the operations overload on
// the element type.
template <int Rank, typename Fn>
Status with_float_or_bf16(const quantkv_tensor_t* x, const char* name, const char* dims, Fn&& fn) {
  QUANTKV_RETURN_IF_ERROR(
      check_tensor(x, name, dims, Rank, {QUANTKV_DTYPE_F32, QUANTKV_DTYPE_BF16}));
  if (x->dtype == QUANTKV_DTYPE_F32) {
    TensorView<const float, Rank> v;
    QUANTKV_RETURN_IF_ERROR(to_view(x, name, dims, {QUANTKV_DTYPE_F32}, &v));
    return fn(v);
  }
  TensorView<const bfloat16, Rank> v;
  QUANTKV_RETURN_IF_ERROR(to_view(x, name, dims, {QUANTKV_DTYPE_BF16}, &v));
  return fn(v);
}

// The C paged view as the library's collection (pointer and dtype checks here, the rest in
// validate_paged_kv inside the operation).
Status to_collection(const quantkv_paged_kv_t* c, const char* name, PagedKVCacheCollection* out);

// The ragged operands most calls start with: input_row_offsets [B + 1] (u32), then the paged
// cache `cache_name`.
Status to_ragged_cache(const quantkv_tensor_t* input_row_offsets, const quantkv_paged_kv_t* cache,
                       const char* cache_name, TensorView<const uint32_t, 1>* offsets,
                       PagedKVCacheCollection* out);

// NULL -> the defaults; scores_budget_bytes 0 -> the default budget.
Context to_context(const quantkv_context_t* ctx);

// Range checks for enums that arrive as C ints.
Status check_enum(const char* name, int value, int max_value);

// The C indexer front end as the library's (c_api_rope.cpp); "front_end: null" for NULL.
Status to_front_end(const quantkv_indexer_front_end_t* fe, IndexerFrontEnd* out);

}  // namespace quantkv::capi
