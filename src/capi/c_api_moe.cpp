// C API: prepared experts, their checkpoint loader and the fused experts (quantkv/moe.hpp).
#include <memory>
#include <vector>

#include "c_api_internal.hpp"
#include "quantkv/checkpoint.hpp"
#include "quantkv/moe.hpp"
#include "quantkv/quantkv.h"

struct quantkv_prepared_experts {
  quantkv::PreparedExperts experts;
  std::vector<float> w13_bias, w2_bias;  // a loaded checkpoint's (quantkv_experts_checkpoint_info)
};

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

static_assert(QUANTKV_EXPERTS_GPT_OSS == int(ExpertsCheckpointLayout::kGptOss));
static_assert(QUANTKV_EXPERTS_PER_EXPERT == int(ExpertsCheckpointLayout::kPerExpert));
static_assert(QUANTKV_CHECKPOINT_MXFP4_COMPRESSED_TENSORS ==
              int(CheckpointFormat::kMXFP4CompressedTensors));
static_assert(QUANTKV_MOE_SWIGLU_OAI == int(MoeActivation::kSwigluOai));
static_assert(QUANTKV_GATE_UP_INTERLEAVED == int(GateUpLayout::kInterleaved));

namespace {

Status optional_factors(const quantkv_tensor_t* t, const char* name,
                        TensorView<const float, 1>* out) {
  if (t == nullptr) return Status::Ok();
  return to_view(t, name, "[E]", {QUANTKV_DTYPE_F32}, out);
}

}  // namespace

extern "C" {

quantkv_status_t quantkv_prepare_experts(const quantkv_experts_source_t* source,
                                         const quantkv_context_t* ctx,
                                         quantkv_prepared_experts_t** out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return invalid_argument("out: output pointer is null");
    *out = nullptr;
    if (source == nullptr) return invalid_argument("source: pointer is null");
    QUANTKV_RETURN_IF_ERROR(check_enum("source.format", source->format, QUANTKV_MXFP8));
    ExpertsSource s;
    s.format = static_cast<BlockFormat>(source->format);
    QUANTKV_RETURN_IF_ERROR(to_view(source->w13, "source.w13", "[E, 2I, row_bytes(H)]",
                                    {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.w13));
    QUANTKV_RETURN_IF_ERROR(to_view(source->w13_scale, "source.w13_scale", "[E, 2I, H / SFV]",
                                    {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.w13_scale));
    QUANTKV_RETURN_IF_ERROR(to_view(source->w2, "source.w2", "[E, H, row_bytes(I)]",
                                    {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.w2));
    QUANTKV_RETURN_IF_ERROR(to_view(source->w2_scale, "source.w2_scale", "[E, H, I / SFV]",
                                    {QUANTKV_DTYPE_U8, QUANTKV_DTYPE_E4M3}, &s.w2_scale));
    QUANTKV_RETURN_IF_ERROR(optional_factors(source->w13_alpha, "source.w13_alpha", &s.w13_alpha));
    QUANTKV_RETURN_IF_ERROR(optional_factors(source->w2_alpha, "source.w2_alpha", &s.w2_alpha));
    QUANTKV_RETURN_IF_ERROR(optional_factors(source->x_global, "source.x_global", &s.x_global));
    QUANTKV_RETURN_IF_ERROR(optional_factors(source->h_global, "source.h_global", &s.h_global));
    QUANTKV_RETURN_IF_ERROR(optional_factors(source->w3_alpha, "source.w3_alpha", &s.w3_alpha));
    auto holder = std::make_unique<quantkv_prepared_experts>();
    QUANTKV_RETURN_IF_ERROR(prepare_experts(s, &holder->experts, to_context(ctx)));
    *out = holder.release();
    return Status::Ok();
  });
}

void quantkv_prepared_experts_destroy(quantkv_prepared_experts_t* experts) { delete experts; }

quantkv_status_t quantkv_load_experts_checkpoint(const char* path, const char* prefix,
                                                 quantkv_experts_layout_t layout,
                                                 const quantkv_context_t* ctx,
                                                 quantkv_prepared_experts_t** experts,
                                                 quantkv_experts_checkpoint_info_t* info) {
  return guarded([&]() -> Status {
    if (experts == nullptr) return invalid_argument("experts: output pointer is null");
    *experts = nullptr;
    if (path == nullptr) return invalid_argument("path: pointer is null");
    if (prefix == nullptr) return invalid_argument("prefix: pointer is null");
    QUANTKV_RETURN_IF_ERROR(check_enum("layout", layout, QUANTKV_EXPERTS_PER_EXPERT));
    SafetensorsCheckpoint ckpt;
    QUANTKV_RETURN_IF_ERROR(SafetensorsCheckpoint::open(path, &ckpt));
    LoadedExperts loaded;
    QUANTKV_RETURN_IF_ERROR(load_experts(ckpt, prefix, &loaded, to_context(ctx),
                                         static_cast<ExpertsCheckpointLayout>(layout)));
    auto holder = std::make_unique<quantkv_prepared_experts>();
    holder->experts = std::move(loaded.experts);
    holder->w13_bias = std::move(loaded.w13_bias);
    holder->w2_bias = std::move(loaded.w2_bias);
    if (info != nullptr) {
      info->format = static_cast<quantkv_checkpoint_format_t>(loaded.format);
      info->layout = static_cast<quantkv_experts_layout_t>(loaded.layout);
      info->num_experts = holder->experts.num_experts();
      info->hidden = holder->experts.hidden();
      info->intermediate = holder->experts.intermediate();
      info->gate_up = static_cast<quantkv_gate_up_layout_t>(loaded.gate_up);
      info->activation = static_cast<quantkv_moe_activation_t>(loaded.activation);
      info->w13_bias = holder->w13_bias.empty() ? nullptr : holder->w13_bias.data();
      info->w2_bias = holder->w2_bias.empty() ? nullptr : holder->w2_bias.data();
    }
    *experts = holder.release();
    return Status::Ok();
  });
}

quantkv_status_t quantkv_fused_experts(const quantkv_fused_experts_args_t* args,
                                       const quantkv_context_t* ctx) {
  return guarded([&]() -> Status {
    if (args == nullptr) return invalid_argument("args: pointer is null");
    if (args->experts == nullptr) return invalid_argument("experts: pointer is null");
    QUANTKV_RETURN_IF_ERROR(check_enum("gate_up", args->gate_up, QUANTKV_GATE_UP_INTERLEAVED));
    QUANTKV_RETURN_IF_ERROR(check_enum("activation", args->activation, QUANTKV_MOE_SWIGLU_OAI));
    FusedExpertsArgs a;
    QUANTKV_RETURN_IF_ERROR(to_view(args->x, "x", "[T, H]", {QUANTKV_DTYPE_BF16}, &a.x));
    QUANTKV_RETURN_IF_ERROR(
        to_view(args->topk_ids, "topk_ids", "[T, k]", {QUANTKV_DTYPE_I32}, &a.topk_ids));
    QUANTKV_RETURN_IF_ERROR(to_view(args->topk_weights, "topk_weights", "[T, k]",
                                    {QUANTKV_DTYPE_F32}, &a.topk_weights));
    a.experts = &args->experts->experts;
    a.expert_offset = args->expert_offset;
    a.quantize_activations = args->quantize_activations != 0;
    a.gate_up = static_cast<GateUpLayout>(args->gate_up);
    a.activation = static_cast<MoeActivation>(args->activation);
    a.swiglu_alpha = args->swiglu_alpha;
    a.swiglu_limit = args->swiglu_limit;
    if (args->w13_bias != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->w13_bias, "w13_bias", "[E, 2I]", {QUANTKV_DTYPE_F32}, &a.w13_bias));
    }
    if (args->w2_bias != nullptr) {
      QUANTKV_RETURN_IF_ERROR(
          to_view(args->w2_bias, "w2_bias", "[E, H]", {QUANTKV_DTYPE_F32}, &a.w2_bias));
    }
    QUANTKV_RETURN_IF_ERROR(
        check_tensor(args->y, "y", "[T, H]", 2, {QUANTKV_DTYPE_BF16, QUANTKV_DTYPE_F32}));
    if (args->y->dtype == QUANTKV_DTYPE_F32) {
      QUANTKV_RETURN_IF_ERROR(to_view(args->y, "y", "[T, H]", {QUANTKV_DTYPE_F32}, &a.y_f32));
    } else {
      QUANTKV_RETURN_IF_ERROR(to_view(args->y, "y", "[T, H]", {QUANTKV_DTYPE_BF16}, &a.y));
    }
    return fused_experts(a, to_context(ctx));
  });
}

}  // extern "C"
