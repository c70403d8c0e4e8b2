// Indexer K store (SPEC §5): new K rows [T, D] are quantised per token to e4m3 with one float
// scale and written at position cache_len[b] + i of the indexer's paged K cache.
#include <string>
#include <type_traits>

#include "core/out_of_memory.hpp"
#include "cpu/dispatch.hpp"
#include "cpu/indexer_quantize.hpp"
#include "cpu/quantize_kernels.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

template <typename Elem>
Status validate_store(const TensorView<const Elem, 2>& k, const TensorView<const uint32_t, 1>& offs,
                      const PagedKVCacheCollection& c, uint32_t layer_idx, ScaleMode mode,
                      CacheSnapshot* snap) {
  const int64_t* k_shape = k.shape.data();
  QUANTKV_RETURN_IF_ERROR(check_shape("k", "[T, D]", k, {kAnyExtent, kAnyExtent}));
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
  // From here on only the snapshot's lengths, pages and offsets are read.
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(c, offs, k_shape[0], /*require_pages=*/true,
                                                "input_row_offsets", "k_collection", snap));
  // The codes and scales are written while k and the metadata are read.
  const MemoryRange blocks = memory_range("k_collection.blocks", c.blocks, c.total_elements() * int64_t(dtype_size(c.dtype)));
  const MemoryRange scales = memory_range("k_collection.scales", c.scales, c.total_scales() * int64_t(sizeof(float)));
  for (const MemoryRange& written : {blocks, scales}) {
    QUANTKV_RETURN_IF_ERROR(check_no_overlap(
        written, {memory_range("k", k), memory_range("input_row_offsets", offs),
                  memory_range("k_collection.cache_lengths", c.cache_lengths),
                  memory_range("k_collection.lookup_table", c.lookup_table)}));
  }
  return check_no_overlap(blocks, {scales});
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

template <typename Elem, typename ToFloat>
Status store(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> caller_offs,
             const PagedKVCacheCollection& caller_cache, uint32_t layer, ScaleMode mode, const Context& ctx, ToFloat to_float) {
  CacheSnapshot snap;
  QUANTKV_RETURN_IF_ERROR(validate_store(k, caller_offs, caller_cache, layer, mode, &snap));
  const PagedKVCacheCollection& c = snap.cache;
  const TensorView<const uint32_t, 1> offs = snap.offsets;
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
  return catch_out_of_memory("indexer_k_store", [&] {
    return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, ctx, [](float x) { return x; });
  });
}

Status indexer_k_store(TensorView<const bfloat16, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const Context& ctx) {
  return catch_out_of_memory("indexer_k_store", [&] {
    return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, ctx,
                 [](bfloat16 x) { return bf16_to_float(x.bits); });
  });
}

}  // namespace quantkv
