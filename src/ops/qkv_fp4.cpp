// generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4 (contract §4) and
// fused_qkv_matmul_weight_only: validation, the ragged metadata's snapshot and the paged-cache
// epilogue around the GEMM core (src/cpu/gemm_driver.hpp), which holds every data loop.
#include "quantkv/qkv_fp4.hpp"

#include <string>
#include <vector>

#include "core/cache_snapshot.hpp"
#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "cpu/gemm_driver.hpp"
#include "ops/validate.hpp"

namespace quantkv {
namespace {

constexpr const char* kQkvName = "generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4";

// Q goes to `output` and K/V into the cache blocks while the activations, the metadata and
// (plain calls) `weight_ranges` are still being read: none of them may overlap the two.
// `hidden` and `input_scale` are the activations' ranges (input_scale empty for the
// weight-only call, whose activations are bf16).
Status check_written_ranges(const MemoryRange& hidden, TensorView<const uint32_t, 1> offs,
                            const MemoryRange& input_scale, const PagedKVCacheCollection& kv,
                            TensorView<bfloat16, 2> output,
                            std::initializer_list<MemoryRange> weight_ranges) {
  const MemoryRange blocks = memory_range("kv_collection.blocks", kv.blocks,
                                          kv.total_elements() * int64_t(dtype_size(kv.dtype)));
  const MemoryRange read[] = {hidden, input_scale, memory_range("input_row_offsets", offs),
                              memory_range("kv_collection.cache_lengths", kv.cache_lengths),
                              memory_range("kv_collection.lookup_table", kv.lookup_table)};
  for (const MemoryRange& written : {memory_range("output", output), blocks}) {
    QUANTKV_RETURN_IF_ERROR(
        check_no_overlap(written, {read[0], read[1], read[2], read[3], read[4]}));
    QUANTKV_RETURN_IF_ERROR(check_no_overlap(written, weight_ranges));
  }
  return check_no_overlap(memory_range("output", output), {blocks});
}

// The shared checks of everything but the weight, then one snapshot of the ragged metadata
// (validated, then the only copy read), then the aliasing of the written buffers.
Status validate_call(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                     BlockFormat format, int64_t n, int64_t k,
                     TensorView<const uint8_t, 5> input_scale, const SectionScales& sf,
                     bool single_sf, const PagedKVCacheCollection& kv, uint32_t layer_idx,
                     TensorView<bfloat16, 2> output, CacheSnapshot* snap) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_call(hidden, format, n, k, input_scale, sf, single_sf,
                                                 kv, layer_idx, output));
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(kv, offs, hidden.shape[0], /*require_pages=*/false,
                                                "input_row_offsets", "kv_collection", snap));
  return check_written_ranges(memory_range("hidden_state", hidden), offs,
                              memory_range("input_scale", input_scale), kv, output, {});
}

// A prepared weight's buffers, read while the outputs are written.
MemoryRange prepared_data_range(const PreparedWeights& w) {
  return memory_range("weight.data", w.data(), int64_t(w.data_bytes()));
}
MemoryRange prepared_scales_range(const PreparedWeights& w) {
  return memory_range("weight.scales", w.scales(), int64_t(w.scale_count() * sizeof(uint16_t)));
}

Status check_prepared(const PreparedWeights& w) {
  if (!cpu::is_prepared(w)) {
    return invalid_argument("weight: not a prepared weight (call prepare_qkv_weights first)");
  }
  return Status::Ok();
}

// The GEMM on prepared activations with the paged-cache epilogue: Q rows to `output`, each
// row's K (and V) to its slot at cache_len[b] + i, skipped where the page is a sentinel.
Status run_paged(const cpu::GemmActivations& acts, int64_t m, TensorView<const uint32_t, 1> offs,
                 const PreparedWeights& w, const SectionScales& sf,
                 const PagedKVCacheCollection& kv, uint32_t layer, TensorView<bfloat16, 2> output,
                 const Context& ctx) {
  std::vector<int64_t> k_base(std::size_t(m), -1), v_base(kv.kv_dim == 2 ? std::size_t(m) : 0, -1);
  const int64_t batch = kv.batch_size();
  for (int64_t b = 0; b < batch; ++b) {
    for (uint32_t row = offs(b); row < offs(b + 1); ++row) {
      const int64_t pos = int64_t(kv.cache_lengths(b)) + (row - offs(b));
      const uint32_t page = kv.page_of(b, pos);
      const int64_t slot = pos % kv.page_size;
      const bool real = int64_t(page) < kv.num_blocks;
      k_base[row] = real ? kv.element_offset(page, 0, layer, slot, 0, 0) : -1;
      if (kv.kv_dim == 2) v_base[row] = real ? kv.element_offset(page, 1, layer, slot, 0, 0) : -1;
    }
  }
  cpu::PagedKvEpilogue e;
  e.q_dim = output.shape[1];
  e.kv_width = kv.num_heads * kv.head_size;
  e.n = w.n;
  e.sf_q = sf.q;
  e.sf_k = sf.k;
  e.sf_v = sf.v;
  e.out = reinterpret_cast<uint16_t*>(output.data);
  e.out_stride = output.strides[0];
  e.cache = kv.blocks;
  e.dtype = kv.dtype;
  e.k_base = k_base.data();
  e.v_base = kv.kv_dim == 2 ? v_base.data() : nullptr;
  return cpu::run_gemm(m, acts, w, e.plug(), ctx);
}

// The validated W4A4 / MXFP8 call on a prepared weight (`offs` and `kv`'s metadata are the
// snapshot's). Every allocation happens before anything is written.
Status run_prepared(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                    const PreparedWeights& w, TensorView<const uint8_t, 5> input_scale,
                    const SectionScales& sf, const PagedKVCacheCollection& kv, uint32_t layer,
                    TensorView<bfloat16, 2> output, const Context& ctx) {
  const int64_t m = hidden.shape[0];
  if (m == 0) return Status::Ok();
  cpu::GemmActivations acts;
  cpu::prepare_block_activations(hidden, input_scale, w.format, w.k, ctx, &acts);
  return run_paged(acts, m, offs, w, sf, kv, layer, output, ctx);
}

// Validates and packs a plain weight.
Status repack_weights(TensorView<const uint8_t, 2> weight,
                      TensorView<const uint8_t, 5> weight_scale, BlockFormat format,
                      PreparedWeights* out, const Context& ctx) {
  if (out == nullptr) return invalid_argument("out: pointer is null");
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_weight(weight, weight_scale, format, &k));
  return cpu::pack_weights(weight, {weight_scale.data, true, 0}, format, k, out, ctx);
}

Status fused_prepared(TensorView<const uint8_t, 2> hidden_state,
                      TensorView<const uint32_t, 1> input_row_offsets,
                      const PreparedQkvWeights& weight, TensorView<const uint8_t, 5> input_scale,
                      SectionScales section_sf, const PagedKVCacheCollection& kv_collection,
                      uint32_t layer_idx, TensorView<bfloat16, 2> output, const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(check_prepared(weight));
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(validate_call(hidden_state, input_row_offsets, weight.format, weight.n,
                                        weight.k, input_scale, section_sf, false, kv_collection,
                                        layer_idx, output, &snap));
  QUANTKV_RETURN_IF_ERROR(
      check_written_ranges(memory_range("hidden_state", hidden_state), input_row_offsets,
                           memory_range("input_scale", input_scale), kv_collection, output,
                           {prepared_data_range(weight), prepared_scales_range(weight)}));
  return run_prepared(hidden_state, snap.offsets, weight, input_scale, section_sf, snap.cache,
                      layer_idx, output, ctx);
}

Status fused_plain(TensorView<const uint8_t, 2> hidden, TensorView<const uint32_t, 1> offs,
                   TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
                   TensorView<const uint8_t, 5> weight_scale, SectionScales sf, bool single_sf,
                   const PagedKVCacheCollection& kv, uint32_t layer, TensorView<bfloat16, 2> output,
                   BlockFormat format, const Context& ctx) {
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_weight(weight, weight_scale, format, &k));
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(validate_call(hidden, offs, format, weight.shape[0], k, input_scale, sf,
                                        single_sf, kv, layer, output, &snap));
  QUANTKV_RETURN_IF_ERROR(check_written_ranges(
      memory_range("hidden_state", hidden), offs, memory_range("input_scale", input_scale), kv,
      output, {memory_range("weight", weight), memory_range("weight_scale", weight_scale)}));
  // Per calling thread, the repacked weight's buffer is kept between calls (its contents are
  // rewritten every time), so a repeated plain call does not page-fault a fresh copy.
  thread_local PreparedWeights prepared;
  QUANTKV_RETURN_IF_ERROR(repack_weights(weight, weight_scale, format, &prepared, ctx));
  return run_prepared(hidden, snap.offsets, prepared, input_scale, sf, snap.cache, layer, output,
                      ctx);
}

}  // namespace

Status prepare_qkv_weights(TensorView<const uint8_t, 2> weight,
                           TensorView<const uint8_t, 5> weight_scale, BlockFormat format,
                           PreparedQkvWeights* out, const Context& ctx) {
  return run_entry_point("prepare_qkv_weights", ctx,
                         [&] { return repack_weights(weight, weight_scale, format, out, ctx); });
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    const PreparedQkvWeights& weight, TensorView<const uint8_t, 5> input_scale,
    SectionScales section_sf, const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
    TensorView<bfloat16, 2> output, const Context& ctx) {
  return run_entry_point(kQkvName, ctx, [&] {
    return fused_prepared(hidden_state, input_row_offsets, weight, input_scale, section_sf,
                          kv_collection, layer_idx, output, ctx);
  });
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, float tensor_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx, TensorView<bfloat16, 2> output,
    BlockFormat format, const Context& ctx) {
  return run_entry_point(kQkvName, ctx, [&] {
    return fused_plain(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
                       SectionScales{tensor_sf, tensor_sf, tensor_sf}, true, kv_collection,
                       layer_idx, output, format, ctx);
  });
}

Status generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
    TensorView<const uint8_t, 2> hidden_state, TensorView<const uint32_t, 1> input_row_offsets,
    TensorView<const uint8_t, 2> weight, TensorView<const uint8_t, 5> input_scale,
    TensorView<const uint8_t, 5> weight_scale, SectionScales section_sf,
    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx, TensorView<bfloat16, 2> output,
    BlockFormat format, const Context& ctx) {
  return run_entry_point(kQkvName, ctx, [&] {
    return fused_plain(hidden_state, input_row_offsets, weight, input_scale, weight_scale,
                       section_sf, false, kv_collection, layer_idx, output, format, ctx);
  });
}

Status fused_qkv(const FusedQkvArgs& a, const Context& ctx) {
  return run_entry_point("fused_qkv", ctx, [&]() -> Status {
    if (a.kv_collection == nullptr) return invalid_argument("kv_collection: pointer is null");
    const bool quantised = given(a.hidden_state), bf16 = given(a.hidden_state_bf16);
    if (quantised == bf16) {
      return invalid_argument(
          std::string("hidden_state, hidden_state_bf16: expected exactly one of the quantised "
                      "activations (with input_scale) and the bf16 activations, got ") +
          (quantised ? "both" : "neither"));
    }
    const bool plain = given(a.weight);
    if ((a.prepared != nullptr) == plain) {
      return invalid_argument(
          std::string("prepared, weight: expected exactly one of a prepared weight and a plain "
                      "weight (with weight_scale and format), got ") +
          (plain ? "both" : "neither"));
    }
    if (bf16 && plain) {
      return invalid_argument(
          "weight: the weight-only call (hidden_state_bf16) takes a prepared weight "
          "(prepare_weights)");
    }
    if (bf16) {
      return fused_qkv_matmul_weight_only(a.hidden_state_bf16, a.input_row_offsets, *a.prepared,
                                          a.scale, *a.kv_collection, a.layer_idx, a.output, ctx);
    }
    if (plain) {
      return fused_plain(a.hidden_state, a.input_row_offsets, a.weight, a.input_scale,
                         a.weight_scale, a.scale, false, *a.kv_collection, a.layer_idx, a.output,
                         a.format, ctx);
    }
    return fused_prepared(a.hidden_state, a.input_row_offsets, *a.prepared, a.input_scale, a.scale,
                          *a.kv_collection, a.layer_idx, a.output, ctx);
  });
}

Status fused_qkv_matmul_weight_only(TensorView<const bfloat16, 2> hidden_state,
                                    TensorView<const uint32_t, 1> input_row_offsets,
                                    const PreparedQkvWeights& weight, SectionScales section_sf,
                                    const PagedKVCacheCollection& kv_collection, uint32_t layer_idx,
                                    TensorView<bfloat16, 2> output, const Context& ctx) {
  return run_entry_point("fused_qkv_matmul_weight_only", ctx, [&]() -> Status {
    QUANTKV_RETURN_IF_ERROR(check_prepared(weight));
    QUANTKV_RETURN_IF_ERROR(ops::validate_qkv_weight_only_call(
        hidden_state, weight.n, weight.k, section_sf, kv_collection, layer_idx, output));
    // One snapshot of the ragged metadata (validated, then the only copy read), then the
    // aliasing of the written output and cache blocks with the activations, the metadata and
    // the prepared weight.
    CacheSnapshot snap;
    QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(
        kv_collection, input_row_offsets, hidden_state.shape[0],
        /*require_pages=*/false, "input_row_offsets", "kv_collection", &snap));
    QUANTKV_RETURN_IF_ERROR(check_written_ranges(
        memory_range("hidden_state", hidden_state), input_row_offsets, MemoryRange{}, kv_collection,
        output, {prepared_data_range(weight), prepared_scales_range(weight)}));
    const int64_t m = hidden_state.shape[0];
    if (m == 0) return Status::Ok();
    cpu::GemmActivations acts;
    cpu::prepare_bf16_activations(hidden_state, sf_vector_size(weight.format), ctx, &acts);
    return run_paged(acts, m, snap.offsets, weight, section_sf, snap.cache, layer_idx, output, ctx);
  });
}

}  // namespace quantkv
