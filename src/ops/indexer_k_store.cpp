// Indexer K store (SPEC §5): new K rows [T, D] are quantised per token to e4m3 with one float
// scale and written at position cache_len[b] + i of the indexer's paged K cache.
#include <cstring>
#include <string>
#include <type_traits>

#include "core/engine_layout_view.hpp"
#include "core/indexer_keys.hpp"
#include "cpu/indexer_quantize.hpp"
#include "cpu/kernels.hpp"
#include "ops/validate.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {
namespace {

// The shared checks, then the ragged metadata (read in place on the CPU).
template <typename Elem>
Status validate_store(const TensorView<const Elem, 2>& k, const TensorView<const uint32_t, 1>& offs,
                      const PagedKVCacheCollection& c, uint32_t layer_idx, ScaleMode mode) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_k_store(k, c, layer_idx, mode));
  QUANTKV_RETURN_IF_ERROR(validate_row_offsets(offs, c.batch_size(), k.shape[0], "input_row_offsets"));
  return validate_ragged_cache(c, offs, /*require_pages=*/true, "k_collection");
}
template <typename Elem>
Status validate_store(const TensorView<const Elem, 2>& k, const TensorView<const uint32_t, 1>& offs,
                      const EngineIndexerKCache& c, ScaleMode mode) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_k_store(k, c, mode));
  QUANTKV_RETURN_IF_ERROR(validate_row_offsets(offs, c.batch_size(), k.shape[0], "input_row_offsets"));
  return validate_ragged_cache(detail::as_collection(c), offs, /*require_pages=*/true, "k_cache");
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

// Quantises row t of k into the key row and scale of its position (validated before).
template <typename Elem, typename ToFloat>
void store_rows(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs, const detail::IndexerKeys& c,
                const Context& ctx, ScaleMode mode, ToFloat to_float) {
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
    const float s = fast != nullptr
                        ? fast(reinterpret_cast<const Raw*>(k.data + t * k.strides[0]), D, mode, dst)
                        : cpu::quantize_row([&](int64_t d) { return to_float(k(t, d)); }, D, mode, dst);
    std::memcpy(c.scale_bytes(page, slot), &s, sizeof(float));
  }
}

template <typename Elem, typename ToFloat>
Status store(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs, const PagedKVCacheCollection& c,
             uint32_t layer, ScaleMode mode, const Context& ctx, ToFloat to_float) {
  QUANTKV_RETURN_IF_ERROR(validate_store(k, offs, c, layer, mode));
  store_rows(k, offs, detail::indexer_keys(c, layer), ctx, mode, to_float);
  return Status::Ok();
}

template <typename Elem, typename ToFloat>
Status store(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs, const EngineIndexerKCache& c,
             ScaleMode mode, const Context& ctx, ToFloat to_float) {
  QUANTKV_RETURN_IF_ERROR(validate_store(k, offs, c, mode));
  store_rows(k, offs, detail::indexer_keys(c), ctx, mode, to_float);
  return Status::Ok();
}

float bf16_value(bfloat16 x) { return bf16_to_float(x.bits); }
float f32_value(float x) { return x; }

}  // namespace

Status indexer_k_store(TensorView<const float, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, ctx, f32_value);
}

Status indexer_k_store(TensorView<const bfloat16, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, ctx, bf16_value);
}

Status indexer_k_store(TensorView<const float, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode, const Context& ctx) {
  return store(k, input_row_offsets, k_cache, scale_mode, ctx, f32_value);
}

Status indexer_k_store(TensorView<const bfloat16, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode, const Context& ctx) {
  return store(k, input_row_offsets, k_cache, scale_mode, ctx, bf16_value);
}

}  // namespace quantkv
