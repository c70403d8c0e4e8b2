// Indexer K store (SPEC §5): new K rows [T, D] are quantised per token to e4m3 with one float
// scale and written at position cache_len[b] + i of the indexer's paged K cache.
#include <string>
#include <type_traits>

#include "cpu/kernels.hpp"
#include "cpu/indexer_quantize.hpp"
#include "ops/validate.hpp"
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

// The vector row kernel for Elem on this CPU, or null (scalar path) when rows are strided.
template <typename Elem>
auto vector_kernel(bool unit_stride) {
  if constexpr (std::is_same_v<Elem, bfloat16>) {
    return unit_stride ? cpu::kernels().quantize.token_bf16 : nullptr;
  } else {
    return unit_stride ? cpu::kernels().quantize.token_f32 : nullptr;
  }
}

template <typename Elem, typename ToFloat>
Status store(TensorView<const Elem, 2> k, TensorView<const uint32_t, 1> offs, const PagedKVCacheCollection& c,
             uint32_t layer, ScaleMode mode, const Context& ctx, ToFloat to_float) {
  QUANTKV_RETURN_IF_ERROR(validate_store(k, offs, c, layer, mode));
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
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, ctx, [](float x) { return x; });
}

Status indexer_k_store(TensorView<const bfloat16, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
                       const Context& ctx) {
  return store(k, input_row_offsets, k_collection, layer_idx, scale_mode, ctx,
               [](bfloat16 x) { return bf16_to_float(x.bits); });
}

}  // namespace quantkv
