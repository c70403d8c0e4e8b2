// quantize_dynamic_block_scaled (SPEC §5): activations -> NVFP4 / MXFP4 / MXFP8 data and 5-D
// swizzled block scales, MAX's and TensorRT-LLM's recipe with IEEE fp32 arithmetic at every
// step (exact reciprocals and divisions instead of the GPU's approximate ones).
#include <cmath>
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "core/out_of_memory.hpp"
#include "cpu/dispatch.hpp"
#include "cpu/quantize_kernels.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv {

const char* block_format_name(BlockFormat format) {
  switch (format) {
    case BlockFormat::kNVFP4: return "NVFP4";
    case BlockFormat::kMXFP4: return "MXFP4";
    case BlockFormat::kMXFP8: return "MXFP8";
  }
  return "unknown";
}

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// max |x| of a block; NaN elements are skipped (fmaxf), as the GPU recipes' fmaxf does.
float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

// One block of SFV values: writes its data bytes and returns its scale code.
uint8_t quantize_block(const float* x, int sfv, float g, float inv_g, BlockFormat f,
                       uint8_t* data) {
  const float amax = block_amax(x, sfv);
  if (f == BlockFormat::kNVFP4) {
    const uint8_t sf = float_to_e4m3(g * (amax * (1.0f / 6.0f)));
    const float sf_f = e4m3_to_float(sf);
    const float out = sf_f != 0.0f ? 1.0f / (sf_f * inv_g) : 0.0f;
    for (int i = 0; i < sfv; i += 2) {
      data[i / 2] = e2m1_pack(float_to_e2m1(x[i] * out), float_to_e2m1(x[i + 1] * out));
    }
    return sf;
  }
  const float emax = f == BlockFormat::kMXFP8 ? kE4M3Max : kE2M1Max;
  const uint8_t sf = float_to_e8m0(amax / emax);
  // x / sf with sf a power of two in [2^-127, 2^127]: its reciprocal is exact, so multiplying
  // gives the same bits as the recipe's division (both round the same exact value once).
  const float inv_sf = 1.0f / e8m0_to_float(sf);
  if (f == BlockFormat::kMXFP8) {
    for (int i = 0; i < sfv; ++i) data[i] = float_to_e4m3(x[i] * inv_sf);
  } else {
    for (int i = 0; i < sfv; i += 2) {
      data[i / 2] = e2m1_pack(float_to_e2m1(x[i] * inv_sf), float_to_e2m1(x[i + 1] * inv_sf));
    }
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
    return unit_stride ? select_kernel<cpu::BlockQuantizeBf16>(
                             nullptr, QUANTKV_AVX2_OR_NULL(cpu::block_quantize_bf16_avx2), QUANTKV_AVX512_OR_NULL(cpu::block_quantize_bf16_avx512))
                       : nullptr;
  } else {
    return unit_stride ? select_kernel<cpu::BlockQuantizeF32>(
                             nullptr, QUANTKV_AVX2_OR_NULL(cpu::block_quantize_f32_avx2), QUANTKV_AVX512_OR_NULL(cpu::block_quantize_f32_avx512))
                       : nullptr;
  }
}

template <typename T>
Status quantize_impl(TensorView<const T, 2> x, float g, BlockFormat f,
                     TensorView<uint8_t, 2> data, TensorView<uint8_t, 5> scales,
                     const Context& ctx) {
  if (f != BlockFormat::kNVFP4 && f != BlockFormat::kMXFP4 && f != BlockFormat::kMXFP8) {
    return invalid_argument("format: expected NVFP4, MXFP4 or MXFP8, got " + str(int(f)));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("x", "[M, K]", x, {kAnyExtent, kAnyExtent}));
  const int64_t m = x.shape[0], k = x.shape[1];
  const int sfv = sf_vector_size(f);
  if (k % sfv != 0) {
    return invalid_argument("x: expected K to be a multiple of SF_VECTOR_SIZE = " + str(sfv) +
                            " for " + block_format_name(f) + ", got K = " + str(k));
  }
  if (f == BlockFormat::kNVFP4 && !(std::isfinite(g) && g > 0.0f)) {
    return invalid_argument("global_scale: expected a finite g = 448*6 / amax > 0 for NVFP4, got " +
                            std::to_string(g));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("data", "[M, row_bytes(K)]", data, {m, row_bytes(f, k)}));
  if (data.shape[1] > 1 && data.strides[1] != 1) {
    return invalid_argument("data: expected unit stride along a row, got " + str(data.strides[1]));
  }
  const int64_t kb_count = k / sfv;
  QUANTKV_RETURN_IF_ERROR((check_contiguous<uint8_t, 5>("scales", "[ceil(M/128), ceil(Kb/4), 32, 4, 4]",
                                           scales, swizzled_scale_shape(m, kb_count))));
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("data", data));  // scales are contiguous
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("data", data), {memory_range("x", x), memory_range("scales", scales)}));
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("scales", scales), {memory_range("x", x)}));
  const float inv_g = 1.0f / g;
  const int64_t blocks_bytes = row_bytes(f, sfv);
  // Streaming: the row is read once and its codes written once.
  const int threads = threads_for_work(ctx, double(m) * double(k) * (double(sizeof(T)) + 1.0),
                                       kMinBytesPerThread);
  const auto fast = vector_kernel<T>(k <= 1 || x.strides[1] == 1);
  // Per-thread rows, allocated before the region and before the first write.
  const std::size_t row_len = std::size_t(k > 0 ? k : 1), sf_len = std::size_t(kb_count > 0 ? kb_count : 1);
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
        for (int64_t kb = 0; kb < kb_count; ++kb) scales.data[swizzled_scale_offset(r, kb, kb_count)] = sf[kb];
        continue;
      }
      for (int64_t i = 0; i < k; ++i) row[i] = to_float(x(r, i));
      uint8_t* out = data.data + r * data.strides[0];
      for (int64_t kb = 0; kb < kb_count; ++kb) {
        scales.data[swizzled_scale_offset(r, kb, kb_count)] =
            quantize_block(row + kb * sfv, sfv, g, inv_g, f, out + kb * blocks_bytes);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status quantize_dynamic_block_scaled(TensorView<const float, 2> x, float global_scale,
                                     BlockFormat format, TensorView<uint8_t, 2> data,
                                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  return catch_out_of_memory("quantize_dynamic_block_scaled",
                             [&] { return quantize_impl(x, global_scale, format, data, scales, ctx); });
}

Status quantize_dynamic_block_scaled(TensorView<const bfloat16, 2> x, float global_scale,
                                     BlockFormat format, TensorView<uint8_t, 2> data,
                                     TensorView<uint8_t, 5> scales, const Context& ctx) {
  return catch_out_of_memory("quantize_dynamic_block_scaled",
                             [&] { return quantize_impl(x, global_scale, format, data, scales, ctx); });
}

}  // namespace quantkv
