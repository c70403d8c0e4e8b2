// C API: sparse MLA attention (quantkv/sparse_mla.hpp).
#include "c_api_internal.hpp"
#include "quantkv/quantkv.h"
#include "quantkv/sparse_mla.hpp"

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

extern "C" {

quantkv_status_t quantkv_sparse_mla_attention(const quantkv_sparse_mla_args_t* args,
                                              const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (args == nullptr) return invalid_argument("args: pointer is null");
    SparseMlaArgs a;
    QUANTKV_RETURN_IF_ERROR(to_view(args->q, "q", "[T, H, d_qk]", {QUANTKV_DTYPE_BF16}, &a.q));
    if (args->kv != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->kv, "kv", "[num_slots, d_qk]", {QUANTKV_DTYPE_BF16}, &a.kv));
    }
    if (args->kv_fp8 != nullptr) {
      QUANTKV_RETURN_IF_ERROR(to_view(args->kv_fp8, "kv_fp8", "[num_slots, row_bytes]",
                                      {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &a.kv_fp8));
    }
    QUANTKV_RETURN_IF_ERROR(
        to_view(args->indices, "indices", "[T, top_k]", {QUANTKV_DTYPE_I32}, &a.indices));
    if (args->topk_length != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->topk_length, "topk_length", "[T]", {QUANTKV_DTYPE_I32}, &a.topk_length));
    }
    a.sm_scale = args->sm_scale;
    QUANTKV_RETURN_IF_ERROR(to_view(args->out, "out", "[T, H, d_v]", {QUANTKV_DTYPE_BF16}, &a.out));
    if (args->lse != nullptr) {
      QUANTKV_RETURN_IF_ERROR(to_view(args->lse, "lse", "[T, H]", {QUANTKV_DTYPE_F32}, &a.lse));
    }
    return sparse_mla_attention(a, to_context(ctx));
  });
}

int64_t quantkv_sparse_mla_fp8_row_bytes(int64_t d_v, int64_t d_rope) {
  return sparse_mla_fp8_row_bytes(d_v, d_rope);
}

}  // extern "C"
