// fused_qk_rope_ragged on the GPU: one block per new token; its threads take the (head, pair)
// items of Q, then of K. Each pair turns with the CPU rows' operations, products and sums
// rounded separately (__fmul_rn / __fsub_rn / __fadd_rn: never contracted into an FMA), so the
// bits equal the CPU path's. K elements are read in the cache dtype, rotated in fp32 and
// written back once.
// clang-format off
#include "cuda/common/host_headers.cuh"  // first: see the file
// clang-format on

#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/kernel_math.hpp"
#include "cuda/common/paged.cuh"
#include "cuda/launch.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ void rotate(float& a, float& b, float c, float s) {
  const float a0 = a, b0 = b;
  a = __fsub_rn(__fmul_rn(a0, c), __fmul_rn(b0, s));
  b = __fadd_rn(__fmul_rn(a0, s), __fmul_rn(b0, c));
}

// Element indices (within the rope part) of pair i.
__device__ __forceinline__ int2 pair_of(const launch::RopeArgs& a, int i) {
  return a.interleaved ? make_int2(2 * i, 2 * i + 1) : make_int2(i, i + a.rope_dim / 2);
}

__device__ __forceinline__ float load_cache(const launch::RopeArgs& a, int64_t e) {
  switch (DType(a.cache.dtype)) {
    case DType::kF32:
      return static_cast<const float*>(a.cache.blocks)[e];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(a.cache.blocks)[e]);
    case DType::kF16:
      return fp16_to_float(static_cast<const uint16_t*>(a.cache.blocks)[e]);
    default:
      return e4m3_to_float(static_cast<const uint8_t*>(a.cache.blocks)[e]);
  }
}
__device__ __forceinline__ void store_cache(const launch::RopeArgs& a, int64_t e, float v) {
  switch (DType(a.cache.dtype)) {
    case DType::kF32:
      static_cast<float*>(a.cache.blocks)[e] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(a.cache.blocks)[e] = float_to_bf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(a.cache.blocks)[e] = float_to_fp16(v);
      break;
    default:
      static_cast<uint8_t*>(a.cache.blocks)[e] = float_to_e4m3(v);
      break;
  }
}

__global__ void __launch_bounds__(kThreads) rope_kernel(const launch::RopeArgs a) {
  const int64_t t = blockIdx.x;
  const int32_t b = detail::sequence_of_row(a.offs, a.batch, uint32_t(t));
  const int64_t pos = int64_t(detail::cache_length(a.cache, b)) + (t - int64_t(a.offs[b]));
  const int64_t angle_pos =
      a.position_ids != nullptr ? int64_t(a.position_ids[t * a.position_stride]) : pos;
  const float* cs = a.freqs + angle_pos * a.freqs_stride0;
  const int pairs = a.rope_dim / 2;
  // Q: copy the non-rope elements, rotate the pairs.
  for (int i = threadIdx.x; i < a.Hq * a.D; i += blockDim.x) {
    const int h = i / a.D, d = i % a.D;
    if (d >= a.rope_offset && d < a.rope_offset + a.rope_dim) continue;
    a.out[t * a.out_stride0 + h * a.out_stride1 + d * a.out_stride2] =
        a.q[t * a.q_stride0 + h * a.q_stride1 + d * a.q_stride2];
  }
  for (int i = threadIdx.x; i < a.Hq * pairs; i += blockDim.x) {
    const int h = i / pairs, p = i % pairs;
    const int2 e = pair_of(a, p);
    const int64_t base = t * a.q_stride0 + h * a.q_stride1,
                  obase = t * a.out_stride0 + h * a.out_stride1;
    float x0 = bf16_to_float(a.q[base + (a.rope_offset + e.x) * a.q_stride2]);
    float x1 = bf16_to_float(a.q[base + (a.rope_offset + e.y) * a.q_stride2]);
    rotate(x0, x1, cs[2 * p], cs[2 * p + 1]);
    a.out[obase + (a.rope_offset + e.x) * a.out_stride2] = float_to_bf16(x0);
    a.out[obase + (a.rope_offset + e.y) * a.out_stride2] = float_to_bf16(x1);
  }
  // K of every head at the token's cache slot, in place.
  const uint32_t page = detail::page_of(a.cache, b, pos);
  if (page >= a.cache.num_blocks) return;  // validated on the host; never write past the cache
  const int64_t row = detail::paged_row(a.cache, page, 0, pos % a.cache.page_size);
  for (int i = threadIdx.x; i < a.cache.num_heads * pairs; i += blockDim.x) {
    const int h = i / pairs, p = i % pairs;
    const int2 e = pair_of(a, p);
    const int d0 = a.rope_offset + e.x, d1 = a.rope_offset + e.y;
    const int64_t base = (row * a.cache.num_heads + h) * a.cache.head_size;
    float s0 = 1.0f, s1 = 1.0f;
    if (a.cache.scales != nullptr) {
      const float* sc = a.cache.scales + (row * a.cache.num_heads + h) * a.cache.scale_cols;
      s0 = sc[d0 / a.scale_granularity];
      s1 = sc[d1 / a.scale_granularity];
    }
    float x0 = load_cache(a, base + d0), x1 = load_cache(a, base + d1);
    if (a.cache.scales != nullptr) {
      x0 = __fmul_rn(x0, s0);
      x1 = __fmul_rn(x1, s1);
    }
    rotate(x0, x1, cs[2 * p], cs[2 * p + 1]);
    if (a.cache.scales != nullptr) {
      x0 = __fdiv_rn(x0, s0);
      x1 = __fdiv_rn(x1, s1);
    }
    store_cache(a, base + d0, x0);
    store_cache(a, base + d1, x1);
  }
}

}  // namespace

Status launch::fused_qk_rope_ragged(const RopeArgs& args, void* stream) {
  if (args.T == 0) return Status::Ok();
  rope_kernel<<<unsigned(args.T), kThreads, 0, detail::as_stream(stream)>>>(args);
  return detail::launch_status("rope_kernel");
}

}  // namespace quantkv::cuda
