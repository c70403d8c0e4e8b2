// The C API of fused_qk_rope_ragged and of the indexer front end (include/quantkv/quantkv.h).
#include "capi/c_api_internal.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/rope.hpp"

using namespace quantkv;        // NOLINT: this file is the C boundary of the library
using namespace quantkv::capi;  // NOLINT

namespace {

Status to_rope_options(const quantkv_rope_options_t* o, const char* name, RopeOptions* out) {
  const std::string n(name);
  if (o == nullptr) return invalid_argument(n + ": null");
  QUANTKV_RETURN_IF_ERROR(check_enum((n + ".layout").c_str(), o->layout, QUANTKV_ROPE_HALF_SPLIT));
  QUANTKV_RETURN_IF_ERROR(
      check_enum((n + ".placement").c_str(), o->placement, QUANTKV_ROPE_LEADING));
  QUANTKV_RETURN_IF_ERROR(to_view(o->freqs_cis, (n + ".freqs_cis").c_str(),
                                  "[max_seq_len, rope_dim]", {QUANTKV_DTYPE_F32}, &out->freqs_cis));
  if (o->position_ids != nullptr) {
    QUANTKV_RETURN_IF_ERROR(to_view(o->position_ids, (n + ".position_ids").c_str(), "[T]",
                                    {QUANTKV_DTYPE_U32}, &out->position_ids));
  }
  out->layout = static_cast<RopeLayout>(o->layout);
  out->placement = static_cast<RopePlacement>(o->placement);
  return Status::Ok();
}

}  // namespace

namespace quantkv::capi {

Status to_front_end(const quantkv_indexer_front_end_t* fe, IndexerFrontEnd* out) {
  if (fe == nullptr) return invalid_argument("front_end: null");
  QUANTKV_RETURN_IF_ERROR(check_enum("front_end.apply_rope", fe->apply_rope, 1));
  QUANTKV_RETURN_IF_ERROR(check_enum("front_end.hadamard", fe->hadamard, QUANTKV_HADAMARD_WALSH));
  QUANTKV_RETURN_IF_ERROR(check_enum("front_end.rounding", fe->rounding, QUANTKV_ROUND_FLOAT32));
  out->apply_rope = fe->apply_rope != 0;
  if (out->apply_rope)
    QUANTKV_RETURN_IF_ERROR(to_rope_options(&fe->rope, "front_end.rope", &out->rope));
  out->hadamard = static_cast<HadamardMode>(fe->hadamard);
  out->rounding = static_cast<FrontEndRounding>(fe->rounding);
  return Status::Ok();
}

}  // namespace quantkv::capi

namespace {}  // namespace

extern "C" {

quantkv_status_t quantkv_fused_qk_rope_ragged(const quantkv_tensor_t* q_proj,
                                              const quantkv_tensor_t* input_row_offsets,
                                              const quantkv_paged_kv_t* kv_collection,
                                              const quantkv_rope_options_t* options,
                                              uint32_t layer_idx, const quantkv_tensor_t* output,
                                              const quantkv_context_t* ctx) {
  return guarded([&] {
    TensorView<const uint32_t, 1> offs;
    PagedKVCacheCollection cache;
    RopeOptions o;
    QUANTKV_RETURN_IF_ERROR(
        to_ragged_cache(input_row_offsets, kv_collection, "kv_collection", &offs, &cache));
    QUANTKV_RETURN_IF_ERROR(to_rope_options(options, "options", &o));
    const Context c = to_context(ctx);
    return with_float_or_bf16<3>(q_proj, "q_proj", "[T, Hq, D]", [&](auto q) {
      using Elem = std::remove_const_t<typename decltype(q)::element_type>;
      const quantkv_dtype_t dtype =
          std::is_same_v<Elem, float> ? QUANTKV_DTYPE_F32 : QUANTKV_DTYPE_BF16;
      TensorView<Elem, 3> out;
      QUANTKV_RETURN_IF_ERROR(
          to_view(output, "output", "[T, Hq, D] (q_proj's dtype)", {dtype}, &out));
      return fused_qk_rope_ragged(q, offs, cache, o, layer_idx, out, c);
    });
  });
}

quantkv_status_t quantkv_indexer_k_store_front_end(
    const quantkv_tensor_t* k, const quantkv_tensor_t* input_row_offsets,
    const quantkv_paged_kv_t* k_collection, uint32_t layer_idx, quantkv_scale_mode_t scale_mode,
    const quantkv_indexer_front_end_t* front_end, const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    TensorView<const uint32_t, 1> offs;
    PagedKVCacheCollection cache;
    IndexerFrontEnd fe;
    QUANTKV_RETURN_IF_ERROR(
        to_ragged_cache(input_row_offsets, k_collection, "k_collection", &offs, &cache));
    QUANTKV_RETURN_IF_ERROR(to_front_end(front_end, &fe));
    const Context c = to_context(ctx);
    return with_float_or_bf16<2>(k, "k", "[T, D]", [&](auto view) {
      return indexer_k_store(view, offs, cache, layer_idx, static_cast<ScaleMode>(scale_mode), fe,
                             c);
    });
  });
}

quantkv_status_t quantkv_indexer_q_prepare_front_end(
    const quantkv_tensor_t* q, const quantkv_tensor_t* weights, const quantkv_tensor_t* q_fp8,
    const quantkv_tensor_t* q_s, quantkv_scale_mode_t scale_mode,
    const quantkv_indexer_front_end_t* front_end, const quantkv_context_t* ctx) {
  return guarded([&] {
    QUANTKV_RETURN_IF_ERROR(check_enum("scale_mode", scale_mode, QUANTKV_SCALE_POWER_OF_TWO));
    TensorView<const float, 2> w;
    TensorView<float8_e4m3fn, 3> q8;
    TensorView<float, 2> qs;
    IndexerFrontEnd fe;
    QUANTKV_RETURN_IF_ERROR(to_view(weights, "weights", "[T, H]", {QUANTKV_DTYPE_F32}, &w));
    QUANTKV_RETURN_IF_ERROR(
        to_view(q_fp8, "q_fp8", "[T, H, D]", {QUANTKV_DTYPE_E4M3, QUANTKV_DTYPE_U8}, &q8));
    QUANTKV_RETURN_IF_ERROR(to_view(q_s, "q_s", "[T, H]", {QUANTKV_DTYPE_F32}, &qs));
    QUANTKV_RETURN_IF_ERROR(to_front_end(front_end, &fe));
    const Context c = to_context(ctx);
    return with_float_or_bf16<3>(q, "q", "[T, H, D]", [&](auto view) {
      return indexer_q_prepare(view, w, q8, qs, static_cast<ScaleMode>(scale_mode), fe, c);
    });
  });
}

}  // extern "C"
