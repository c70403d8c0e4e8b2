// Indexer K store (SPEC §5): new K rows [T, D] are quantised per token to e4m3 with one float
// scale and written at position cache_len[b] + i of the indexer's paged K cache.
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/dispatch.hpp"
#include "cpu/indexer_front_end.hpp"
#include "cpu/indexer_quantize.hpp"
#include "cpu/quantize_kernels.hpp"
#include "ops/ragged_tokens.hpp"
#include "ops/rope_options.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

Status validate_store(const int64_t* k_shape, const void* k_data, const int64_t* k_strides,
                      const TensorView<const uint32_t, 1>& offs, const PagedKVCacheCollection& c,
                      uint32_t layer_idx, ScaleMode mode, const IndexerFrontEnd* fe) {
  const int64_t expected[2] = {kAnyExtent, kAnyExtent};
  QUANTKV_RETURN_IF_ERROR(detail::check_view("k", "[T, D]", k_data, k_shape, k_strides, 2, expected, false));
  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(c, "k_collection"));
  const int64_t D = k_shape[1];
  if (c.dtype != DType::kE4M3) {
    return invalid_argument(std::string("k_collection.dtype: expected float8_e4m3fn, got ") + dtype_name(c.dtype));
  }
  if (c.num_heads != 1) return invalid_argument("k_collection.num_heads: expected 1, got " + str(c.num_heads));
  if (c.head_size != D) {
    return invalid_argument("k: expected D = k.shape[1] == k_collection.head_size = " + str(c.head_size) +
                            ", got " + str(D));
  }
  if (c.scales == nullptr) return invalid_argument("k_collection.scales: expected per-token float scales, got null");
  if (c.scale_granularity < D) {
    return invalid_argument("k_collection.scale_granularity: expected >= head_size = " + str(D) +
                            " (one scale per token), got " + str(c.scale_granularity));
  }
  if (int64_t(layer_idx) >= c.num_layers) {
    return out_of_range("layer_idx: expected < k_collection.num_layers = " + str(c.num_layers) + ", got " +
                        str(layer_idx));
  }
  if (mode != ScaleMode::kFloat && mode != ScaleMode::kPowerOfTwo) {
    return invalid_argument("scale_mode: expected kFloat or kPowerOfTwo, got " + str(int(mode)));
  }
  if (fe != nullptr) QUANTKV_RETURN_IF_ERROR(detail::validate_front_end(*fe, k_shape[0], D, false));
  QUANTKV_RETURN_IF_ERROR(validate_row_offsets(offs, c.batch_size(), k_shape[0], "input_row_offsets"));
  QUANTKV_RETURN_IF_ERROR(validate_ragged_cache(c, offs, /*require_pages=*/true, "k_collection"));
  if (fe != nullptr && fe->apply_rope) {
    return detail::validate_rope_cache_positions(fe->rope, c, offs, "front_end.rope");
  }
  return Status::Ok();
}

// The vector row kernel for Elem on this CPU, or null (scalar path) when rows are strided.
template <typename Elem>
auto vector_kernel(bool unit_stride) {
  if constexpr (std::is_same_v<Elem, bfloat16>) {
    return unit_stride ? select_kernel<cpu::TokenQuantizeBf16>(
                             nullptr, QUANTKV_AVX2_OR_NULL(cpu::token_quantize_bf16_avx2), QUANTKV_AVX512_OR_NULL(cpu::token_quantize_bf16_avx512))
                       : nullptr;
  } else {
    return unit_stride ? select_kernel<cpu::TokenQuantizeF32>(
                             nullptr, QUANTKV_AVX2_OR_NULL(cpu::token_quantize_f32_avx2), QUANTKV_AVX512_OR_NULL(cpu::token_quantize_f32_avx512))
                       : nullptr;
  }
}

// The front-end path: each row loaded to fp32, rotated (RoPE at the token's position, Hadamard)
// and quantised into the cache.
template <typename Elem, typename ToFloat>
void store_front_end(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs, const PagedKVCacheCollection& c,
                     uint32_t layer, ScaleMode mode, const IndexerFrontEnd& fe, const Context& ctx, ToFloat to_float) {
  const int64_t T = k.shape[0], D = k.shape[1];
  const cpu::FrontEndPlan plan = cpu::make_front_end_plan(fe, D);
  auto* blocks = static_cast<uint8_t*>(c.blocks);
  const int threads = threads_for_work(ctx, double(T) * double(D) * (double(sizeof(Elem)) + 1.0),
                                       kMinBytesPerThread);
  detail::for_each_new_token(c, offs, threads, D, [&](int64_t t, int64_t b, int64_t pos, float* row) {
    const int64_t page = c.page_of(b, pos), slot = pos % c.page_size;
    for (int64_t d = 0; d < D; ++d) row[d] = to_float(k(t, d));
    const float* cs = fe.apply_rope ? detail::rope_table_row(fe.rope, t, pos) : nullptr;
    c.scales[c.scale_offset(page, 0, layer, slot, 0, 0)] = cpu::front_end_quantize_row(
        plan, row, D, cs, mode, blocks + c.element_offset(page, 0, layer, slot, 0, 0));
  });
}

template <typename Elem, typename ToFloat>
Status store(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs, const PagedKVCacheCollection& c,
             uint32_t layer, ScaleMode mode, const IndexerFrontEnd* fe, const Context& ctx, ToFloat to_float) {
  QUANTKV_RETURN_IF_ERROR(validate_store(k.shape.data(), k.data, k.strides.data(), offs, c, layer, mode, fe));
  if (fe != nullptr) {
    store_front_end(k, offs, c, layer, mode, *fe, ctx, to_float);
    return Status::Ok();
  }
  const int64_t T = k.shape[0], D = k.shape[1];
  const std::vector<int32_t> seq = row_to_sequence(offs);
  auto* blocks = static_cast<uint8_t*>(c.blocks);
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
    uint8_t* dst = blocks + c.element_offset(page, 0, layer, slot, 0, 0);
    const float s = fast != nullptr
                        ? fast(reinterpret_cast<const Raw*>(k.data + t * k.strides[0]), D, mode, dst)
                        : cpu::quantize_row([&](int64_t d) { return to_float(k(t, d)); }, D, mode, dst);
    c.scales[c.scale_offset(page, 0, layer, slot, 0, 0)] = s;
  }
  return Status::Ok();
}

}  // namespace

Status indexer_k_store(TensorView<const float, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, nullptr, ctx, [](float x) { return x; });
}

Status indexer_k_store(TensorView<const bfloat16, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, nullptr, ctx,
               [](bfloat16 x) { return bf16_to_float(x.bits); });
}

Status indexer_k_store(TensorView<const float, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const IndexerFrontEnd& front_end, const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, &front_end, ctx,
               [](float x) { return x; });
}

Status indexer_k_store(TensorView<const bfloat16, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const IndexerFrontEnd& front_end, const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, &front_end, ctx,
               [](bfloat16 x) { return bf16_to_float(x.bits); });
}

}  // namespace quantkv
