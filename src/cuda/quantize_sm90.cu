// Block-scaled quantisation (contract §5) on the GPU: one thread per (row, scale block) of the
// padded 5-D scale grid. Real blocks run the shared recipe (src/core/recipes.hpp: the
// same IEEE operations as the CPU, so the bytes agree exactly); padding entries get a zero scale.
#include <cuda_runtime.h>

#include "core/recipes.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/common/host_headers.cuh"
#include "cuda/launch.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSfv = 32;

__device__ __forceinline__ float load_x(const launch::QuantizeArgs& a, int64_t r, int64_t k) {
  const int64_t off = r * a.x_stride0 + k * a.x_stride1;
  return a.x_bf16 ? bf16_to_float(static_cast<const uint16_t*>(a.x)[off])
                  : static_cast<const float*>(a.x)[off];
}

// One instantiation per format, so the block's values stay in registers (unrolled loops).
template <BlockFormat kFormat>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const launch::QuantizeArgs a) {
  constexpr BlockFormat format = kFormat;
  constexpr int sfv = kFormat == BlockFormat::kNVFP4 ? 16 : 32;
  static_assert(sfv <= kMaxSfv);
  const int64_t kb_count = a.K / sfv;
  const int64_t kb_pad = (kb_count + 3) / 4 * 4, rows_pad = (int64_t(a.M) + 127) / 128 * 128;
  const int64_t id = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (id >= rows_pad * kb_pad) return;
  const int64_t r = id / kb_pad, kb = id % kb_pad;
  uint8_t* scale = a.scales + swizzled_scale_offset(r, kb, kb_count);
  if (r >= a.M || kb >= kb_count) {
    *scale = 0;  // padding, read by hardware consumers
    return;
  }
  float x[kMaxSfv];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < sfv; ++i) {
    x[i] = load_x(a, r, kb * sfv + i);
    amax = recipe::amax_update(amax, x[i]);
  }
  uint8_t* row = a.data + r * a.data_stride0;
  if constexpr (format == BlockFormat::kNVFP4) {
    const recipe::Nvfp4BlockScale bs = recipe::nvfp4_block_scale(amax, a.global_scale);
    *scale = bs.sf_bits;
#pragma unroll
    for (int i = 0; i < sfv; i += 2) {
      const uint8_t lo = recipe::nvfp4_quantize_value(x[i], bs.out);
      const uint8_t hi = recipe::nvfp4_quantize_value(x[i + 1], bs.out);
      row[((kb * sfv + i) / 2) * a.data_stride1] = e2m1_pack(lo, hi);
    }
  } else if constexpr (format == BlockFormat::kMXFP4) {
    const uint8_t sf = recipe::mx_block_scale(amax, kE2M1Max);
    *scale = sf;
#pragma unroll
    for (int i = 0; i < sfv; i += 2) {
      const uint8_t lo = recipe::mxfp4_quantize_value(x[i], sf);
      const uint8_t hi = recipe::mxfp4_quantize_value(x[i + 1], sf);
      row[((kb * sfv + i) / 2) * a.data_stride1] = e2m1_pack(lo, hi);
    }
  } else {
    const uint8_t sf = recipe::mx_block_scale(amax, kE4M3Max);
    *scale = sf;
#pragma unroll
    for (int i = 0; i < sfv; ++i) {
      row[(kb * sfv + i) * a.data_stride1] = recipe::mxfp8_quantize_value(x[i], sf);
    }
  }
}

}  // namespace

Status launch::quantize(const QuantizeArgs& args, void* stream) {
  const int64_t kb_count = args.K / sf_vector_size(BlockFormat(args.format));
  const int64_t total = (int64_t(args.M) + 127) / 128 * 128 * ((kb_count + 3) / 4 * 4);
  if (total == 0) return Status::Ok();
  const unsigned blocks = unsigned(detail::ceil_div(total, kThreads));
  const cudaStream_t s = detail::as_stream(stream);
  switch (BlockFormat(args.format)) {
    case BlockFormat::kNVFP4:
      quantize_kernel<BlockFormat::kNVFP4><<<blocks, kThreads, 0, s>>>(args);
      break;
    case BlockFormat::kMXFP4:
      quantize_kernel<BlockFormat::kMXFP4><<<blocks, kThreads, 0, s>>>(args);
      break;
    case BlockFormat::kMXFP8:
      quantize_kernel<BlockFormat::kMXFP8><<<blocks, kThreads, 0, s>>>(args);
      break;
  }
  return detail::launch_status("quantize_kernel");
}

}  // namespace quantkv::cuda
