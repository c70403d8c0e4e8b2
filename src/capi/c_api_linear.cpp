// C API: prepared weights from a WeightSource and the plain linear layer (quantkv/linear.hpp).
#include <memory>

#include "c_api_internal.hpp"
#include "quantkv/linear.hpp"
#include "quantkv/quantkv.h"

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

extern "C" {

quantkv_status_t quantkv_prepare_weights(const quantkv_weight_source_t* source,
                                         const quantkv_context_t* ctx,
                                         quantkv_prepared_weights_t** out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return invalid_argument("out: output pointer is null");
    *out = nullptr;
    if (source == nullptr) return invalid_argument("source: pointer is null");
    QUANTKV_RETURN_IF_ERROR(check_enum("source.format", source->format, QUANTKV_MXFP8));
    WeightSource s;
    s.format = static_cast<BlockFormat>(source->format);
    QUANTKV_RETURN_IF_ERROR(to_view(source->data, "source.data", "[N, row_bytes(K)]",
                                    {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.data));
    if (source->scale != nullptr) {
      QUANTKV_RETURN_IF_ERROR(to_view(source->scale, "source.scale", "[N/128, Kb/4, 32, 4, 4]",
                                      {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.scale));
    }
    if (source->scale_rows != nullptr) {
      QUANTKV_RETURN_IF_ERROR(to_view(source->scale_rows, "source.scale_rows", "[N, Kb]",
                                      {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.scale_rows));
    }
    auto holder = std::make_unique<quantkv_prepared_qkv_weights>();
    QUANTKV_RETURN_IF_ERROR(prepare_weights(s, &holder->weights, to_context(ctx)));
    *out = holder.release();
    return Status::Ok();
  });
}

quantkv_status_t quantkv_linear(const quantkv_linear_args_t* args, const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (args == nullptr) return invalid_argument("args: pointer is null");
    if (args->weight == nullptr)
      return invalid_argument("weight: prepared weights pointer is null");
    LinearArgs a;
    if (args->x != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->x, "x", "[M, row_bytes(K)]", {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &a.x));
    }
    if (args->x_scale != nullptr) {
      QUANTKV_RETURN_IF_ERROR(to_view(args->x_scale, "x_scale", "[M/128, Kb/4, 32, 4, 4]",
                                      {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &a.x_scale));
    }
    if (args->x_bf16 != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->x_bf16, "x_bf16", "[M, K]", {QUANTKV_DTYPE_BF16}, &a.x_bf16));
    }
    a.weight = &args->weight->weights;
    a.alpha = args->alpha;
    if (args->column_alpha != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->column_alpha, "column_alpha", "[N]", {QUANTKV_DTYPE_F32}, &a.column_alpha));
    }
    if (args->bias != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          check_tensor(args->bias, "bias", "[N]", 1, {QUANTKV_DTYPE_F32, QUANTKV_DTYPE_BF16}));
      if (args->bias->dtype == QUANTKV_DTYPE_F32) {
        QUANTKV_RETURN_IF_ERROR(to_view(args->bias, "bias", "[N]", {QUANTKV_DTYPE_F32}, &a.bias));
      } else {
        QUANTKV_RETURN_IF_ERROR(
            to_view(args->bias, "bias", "[N]", {QUANTKV_DTYPE_BF16}, &a.bias_bf16));
      }
    }
    QUANTKV_RETURN_IF_ERROR(
        check_tensor(args->y, "y", "[M, N]", 2, {QUANTKV_DTYPE_BF16, QUANTKV_DTYPE_F32}));
    if (args->y->dtype == QUANTKV_DTYPE_F32) {
      QUANTKV_RETURN_IF_ERROR(to_view(args->y, "y", "[M, N]", {QUANTKV_DTYPE_F32}, &a.y_f32));
    } else {
      QUANTKV_RETURN_IF_ERROR(to_view(args->y, "y", "[M, N]", {QUANTKV_DTYPE_BF16}, &a.y));
    }
    return linear(a, to_context(ctx));
  });
}

}  // extern "C"
