// Fused QKV projection, decode path (M <= 16): the weight is read once, at memory speed, by
// warps that each own 8 weight rows (output columns) and a share of K; all M rows fit one
// m16 tile. Each lane loads 16 contiguous weight bytes of its row per step (32 fp4 or 16 fp8
// values) and dequantises them straight into the B fragment of mma.m16n8k16.bf16. The MMA's k
// order is free (a dot product does not care), so a lane's contiguous values are mapped to
// the fragment's k slots and the activations are read in the same permuted order. Partial sums
// of the K shares are added in a fixed order in shared memory: the result does not depend on
// timing.
#include "cuda/common/host_headers.cuh"

#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/common/qkv_common.cuh"
#include "cuda/launch.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kSplitK = 2;                 // warps sharing one 8-column tile
constexpr int kTilesPerBlock = 2;          // 8-column tiles per block
constexpr int kWarps = kSplitK * kTilesPerBlock;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;                 // independent 16-byte weight loads in flight per lane
static_assert(launch::kQkvDecodeMaxRows == 16, "one m16 tile holds every row");

// The 16 bytes of row `row` holding values k .. k+vpl-1 (zeros past K; K is a multiple of 16,
// so a 16-value granule is either wholly in range or wholly out).
template <bool kFp8>
__device__ __forceinline__ void load_row_step(const uint8_t* data, int64_t stride, int rows,
                                              int row, int k, const launch::QkvArgs& a,
                                              uint32_t (&w)[4]) {
  w[0] = w[1] = w[2] = w[3] = 0;
  if (row >= rows || k >= a.K) return;
  const uint8_t* p = data + int64_t(row) * stride + (kFp8 ? k : k / 2);
  if (kFp8 || k + 32 <= a.K) {
    detail::load_words<4>(p, a.vector_loads, w);
  } else {  // fp4 tail: only the first 16 values exist
    uint32_t half[2];
    detail::load_words<2>(p, a.vector_loads, half);
    w[0] = half[0], w[1] = half[1];
  }
}

// Dequantises one lane's step (16 bytes at value k of `row`) into bf16x2 words v[0..7]
// (fp4: 32 values -> 16 words; fp8: 16 values -> 8 words).
template <bool kFp8>
__device__ __forceinline__ void dequant_step(const uint32_t (&w)[4], const uint8_t* scales,
                                             int rows, int row, int k, const launch::QkvArgs& a,
                                             uint32_t (&v)[16]) {
  const bool e8m0 = a.format != int(BlockFormat::kNVFP4);
  const int sfv = e8m0 ? 32 : 16, kb_count = a.K / sfv;
  if (row >= rows || k >= a.K) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = 0;
    return;
  }
  if constexpr (kFp8) {  // 16 values, one MX block
    const float s = detail::load_block_scale(scales, row, k, sfv, kb_count, e8m0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t o[2];
      detail::dequant_fp8x4(w[i], s, o);
      v[2 * i] = o[0], v[2 * i + 1] = o[1];
    }
#pragma unroll
    for (int i = 8; i < 16; ++i) v[i] = 0;
  } else {  // 32 values: two 16-value halves (two NVFP4 blocks, or one MX block)
    const float s0 = detail::load_block_scale(scales, row, k, sfv, kb_count, e8m0);
    const float s1 = k + 16 < a.K ? detail::load_block_scale(scales, row, k + 16, sfv, kb_count, e8m0)
                                  : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t o[4];
      detail::dequant_fp4x8(w[i], i < 2 ? s0 : s1, o);
      v[4 * i] = o[0], v[4 * i + 1] = o[1], v[4 * i + 2] = o[2], v[4 * i + 3] = o[3];
    }
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads) qkv_decode_kernel(const launch::QkvArgs a) {
  constexpr int kValuesPerLane = kFp8 ? 16 : 32;
  constexpr int kSteps = kValuesPerLane / 4;       // MMAs per lane step (4 k values each)
  constexpr int kSpan = 4 * kValuesPerLane;        // k covered by one warp step
  __shared__ float partial[kWarps][32][4];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int tile = warp / kSplitK, part = warp % kSplitK;
  const int n = (blockIdx.x * kTilesPerBlock + tile) * 8 + g;  // this lane's weight row

  float acc[4] = {};
  for (int k_base = part * kSpan; k_base < a.K; k_base += kUnroll * kSplitK * kSpan) {
    uint32_t wraw[kUnroll][4];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // issue every weight load first
      const int k = k_base + u * kSplitK * kSpan + c * kValuesPerLane;
      load_row_step<kFp8>(a.w, a.w_stride, a.N, n, k, a, wraw[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k_base + u * kSplitK * kSpan + c * kValuesPerLane;
      if (k_base + u * kSplitK * kSpan >= a.K) break;  // warp-uniform
      uint32_t bw[16], a0w[4], a1w[4], a0[16], a1[16];
      dequant_step<kFp8>(wraw[u], a.w_scale, a.N, n, k, a, bw);
      load_row_step<kFp8>(a.a, a.a_stride, a.M, g, k, a, a0w);
      load_row_step<kFp8>(a.a, a.a_stride, a.M, g + 8, k, a, a1w);
      dequant_step<kFp8>(a0w, a.a_scale, a.M, g, k, a, a0);
      dequant_step<kFp8>(a1w, a.a_scale, a.M, g + 8, k, a, a1);
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        // Lane values 4s..4s+3: the pair (4s, 4s+1) is fragment k (2c, 2c+1), the pair
        // (4s+2, 4s+3) is fragment k (2c+8, 2c+9) -- for A and B alike.
        const uint32_t af[4] = {a0[2 * s], a1[2 * s], a0[2 * s + 1], a1[2 * s + 1]};
        const uint32_t bf[2] = {bw[2 * s], bw[2 * s + 1]};
        detail::mma_bf16_16x8x16(acc, af, bf);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][lane][i] = acc[i];
  __syncthreads();
  if (part != 0) return;
  float sum[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[i] = partial[warp][lane][i];
    for (int p = 1; p < kSplitK; ++p) sum[i] += partial[warp + p][lane][i];
  }
  const int n0 = (blockIdx.x * kTilesPerBlock + tile) * 8 + 2 * c;
  detail::qkv_store(a, g, n0, sum[0]);
  detail::qkv_store(a, g, n0 + 1, sum[1]);
  detail::qkv_store(a, g + 8, n0, sum[2]);
  detail::qkv_store(a, g + 8, n0 + 1, sum[3]);
}

}  // namespace

Status launch::qkv_decode(const QkvArgs& args, void* stream) {
  if (args.M == 0 || args.N == 0) return Status::Ok();
  const unsigned blocks = unsigned(detail::ceil_div(args.N, 8 * kTilesPerBlock));
  if (args.format == int(BlockFormat::kMXFP8)) {
    qkv_decode_kernel<true><<<blocks, kThreads, 0, detail::as_stream(stream)>>>(args);
  } else {
    qkv_decode_kernel<false><<<blocks, kThreads, 0, detail::as_stream(stream)>>>(args);
  }
  return detail::launch_status("qkv_decode_kernel");
}

}  // namespace quantkv::cuda
