// quantize_dynamic_block_scaled (contract §5): activations -> NVFP4 / MXFP4 / MXFP8 data and 5-D
// swizzled block scales, MAX's and TensorRT-LLM's recipe with IEEE fp32 arithmetic at every
// step (exact reciprocals and divisions instead of the GPU's approximate ones).
#include "quantkv/quantize.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/out_of_memory.hpp"
#include "core/recipes.hpp"
#include "core/threads.hpp"
#include "core/view_checks.hpp"
#include "cpu/kernels.hpp"
#include "ops/validate.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv {

const char* block_format_name(BlockFormat format) {
  switch (format) {
    case BlockFormat::kNVFP4:
      return "NVFP4";
    case BlockFormat::kMXFP4:
      return "MXFP4";
    case BlockFormat::kMXFP8:
      return "MXFP8";
  }
  return "unknown";
}

namespace {

// One block of SFV values with the shared recipe (recipes.hpp, also run by the AVX2 / AVX-512
// row kernels and the CUDA quantiser): writes its data bytes and returns its scale code.
uint8_t quantize_block(const float* x, int sfv, float g, BlockFormat f, uint8_t* data) {
  float amax = 0.0f;
  for (int i = 0; i < sfv; ++i) amax = recipe::amax_update(amax, x[i]);
  if (f == BlockFormat::kNVFP4) {
    const recipe::Nvfp4BlockScale s = recipe::nvfp4_block_scale(amax, g);
    for (int i = 0; i < sfv; i += 2) {
      data[i / 2] = e2m1_pack(recipe::nvfp4_quantize_value(x[i], s.out),
                              recipe::nvfp4_quantize_value(x[i + 1], s.out));
    }
    return s.sf_bits;
  }
  if (f == BlockFormat::kMXFP8) {
    const uint8_t sf = recipe::mx_block_scale(amax, kE4M3Max);
    for (int i = 0; i < sfv; ++i) data[i] = recipe::mxfp8_quantize_value(x[i], sf);
    return sf;
  }
  const uint8_t sf = recipe::mx_block_scale(amax, kE2M1Max);
  for (int i = 0; i < sfv; i += 2) {
    data[i / 2] = e2m1_pack(recipe::mxfp4_quantize_value(x[i], sf),
                            recipe::mxfp4_quantize_value(x[i + 1], sf));
  }
  return sf;
}

template <typename T>
float to_float(T v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bf16_to_float(v.bits);
  } else {
    return v;
  }
}

// The vector row kernel for T on this CPU, or null (scalar path) when the rows are strided.
template <typename T>
auto vector_kernel(bool unit_stride) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return unit_stride ? cpu::kernels().quantize.block_bf16 : nullptr;
  } else {
    return unit_stride ? cpu::kernels().quantize.block_f32 : nullptr;
  }
}

template <typename T>
Status quantize_impl(TensorView<const T, 2> x, float g, BlockFormat f, TensorView<uint8_t, 2> data,
                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_quantize(x, g, f, data, scales));
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("data", data),
                                           {memory_range("x", x), memory_range("scales", scales)}));
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("scales", scales), {memory_range("x", x)}));
  const int64_t m = x.shape[0], k = x.shape[1];
  const int sfv = sf_vector_size(f);
  const int64_t kb_count = k / sfv;
  const float inv_g = 1.0f / g;
  const int64_t blocks_bytes = row_bytes(f, sfv);
  // Streaming: the row is read once and its codes written once.
  const int threads =
      threads_for_work(ctx, double(m) * double(k) * (double(sizeof(T)) + 1.0), kMinBytesPerThread);
  const auto fast = vector_kernel<T>(k <= 1 || x.strides[1] == 1);
  // Per-thread rows, allocated before the region and before the first write.
  const std::size_t row_len = std::size_t(k > 0 ? k : 1),
                    sf_len = std::size_t(kb_count > 0 ? kb_count : 1);
  std::vector<float> rows(row_len * std::size_t(threads));
  std::vector<uint8_t> sfs(sf_len * std::size_t(threads));
  std::fill_n(scales.data, scales.numel(), uint8_t{0});  // padding is zero
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float* row = rows.data() + row_len * std::size_t(omp_get_thread_num());
    uint8_t* sf = sfs.data() + sf_len * std::size_t(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      if (fast != nullptr) {
        using Raw = std::conditional_t<std::is_same_v<T, bfloat16>, uint16_t, float>;
        fast(reinterpret_cast<const Raw*>(x.data + r * x.strides[0]), k, f, g, inv_g,
             data.data + r * data.strides[0], sf);
        for (int64_t kb = 0; kb < kb_count; ++kb)
          scales.data[swizzled_scale_offset(r, kb, kb_count)] = sf[kb];
        continue;
      }
      for (int64_t i = 0; i < k; ++i) row[i] = to_float(x(r, i));
      uint8_t* out = data.data + r * data.strides[0];
      for (int64_t kb = 0; kb < kb_count; ++kb) {
        scales.data[swizzled_scale_offset(r, kb, kb_count)] =
            quantize_block(row + kb * sfv, sfv, g, f, out + kb * blocks_bytes);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status quantize_dynamic_block_scaled(const QuantizeArgs& a, const Context& ctx) {
  return run_entry_point("quantize_dynamic_block_scaled", ctx, [&]() -> Status {
    const bool f32 = given(a.x), bf16 = given(a.x_bf16);
    if (f32 == bf16) {
      return invalid_argument(
          std::string("x, x_bf16: expected exactly one of the fp32 and the bf16 rows, got ") +
          (f32 ? "both" : "neither"));
    }
    return f32 ? quantize_impl(a.x, a.global_scale, a.format, a.data, a.scales, ctx)
               : quantize_impl(a.x_bf16, a.global_scale, a.format, a.data, a.scales, ctx);
  });
}

Status quantize_dynamic_block_scaled(TensorView<const float, 2> x, float global_scale,
                                     BlockFormat format, TensorView<uint8_t, 2> data,
                                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  return quantize_dynamic_block_scaled(QuantizeArgs{x, {}, global_scale, format, data, scales},
                                       ctx);
}

Status quantize_dynamic_block_scaled(TensorView<const bfloat16, 2> x, float global_scale,
                                     BlockFormat format, TensorView<uint8_t, 2> data,
                                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  return quantize_dynamic_block_scaled(QuantizeArgs{{}, x, global_scale, format, data, scales},
                                       ctx);
}

}  // namespace quantkv
