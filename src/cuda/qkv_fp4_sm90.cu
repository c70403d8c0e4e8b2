// Fused QKV projection, tiled path (any M; used when M > 16): C = A * B^T with A, B block-scaled
// NVFP4 / MXFP4 / MXFP8. Hopper has no FP4 MMA, so each 128x64 (rows x k) tile of A and B is
// dequantised exactly to bf16 in shared memory (value * |scale| fits bf16) and multiplied on
// mma.m16n8k16.bf16 with fp32 accumulation; the epilogue applies the GEMM factor of the
// column's section and writes Q / scatters K and V into the paged cache.
// Block 128x128, 8 warps as 2 (M) x 4 (N), warp tile 64x32.
#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/host_headers.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/qkv_common.cuh"
#include "cuda/launch.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64;
constexpr int kThreads = 256;
constexpr int kWarpM = 64, kWarpN = 32;
constexpr int kMTiles = kWarpM / 16, kNTiles = kWarpN / 8;
constexpr int kLd = kBK + 8;  // bf16 per staged row: 144 bytes, rows 4 banks apart
constexpr int kGranule = 16;  // k values per load (an NVFP4 scale block; half an MX block)
static_assert((kBM / kWarpM) * (kBN / kWarpN) * 32 == kThreads);
static_assert(kBK % kGranule == 0 && (kLd * 2) % 16 == 0);

// Dequantises rows row0 .. row0+127, k k0 .. k0+63 of one operand into tile[128][kLd] (bf16).
template <BlockFormat F>
__device__ void stage_operand(const uint8_t* data, int64_t stride, const uint8_t* scales, int rows,
                              int row0, int k0, const launch::QkvArgs& a, uint16_t* tile) {
  using T = detail::FormatTraits<F>;
  const int kb_count = a.K / T::kSfv;
  constexpr int kGranulesPerRow = kBK / kGranule;
  for (int idx = threadIdx.x; idx < kBM * kGranulesPerRow; idx += kThreads) {
    const int r = idx / kGranulesPerRow, gk = idx % kGranulesPerRow;
    const int row = row0 + r, k = k0 + gk * kGranule;
    uint32_t bf[8] = {};  // 16 bf16 values
    if (row < rows && k < a.K) {
      const uint8_t sbits = scales[detail::swizzled_row_base(row, kb_count) +
                                   detail::swizzled_col_offset(k / T::kSfv)];
      const uint8_t* p = data + int64_t(row) * stride + (T::kFp8 ? k : k / 2);
      if constexpr (T::kFp8) {
        uint32_t w[4];
        detail::load_words<4>(p, a.vector_loads, w);
        const float s = detail::block_scale_value(sbits, true);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t o[2];
          detail::dequant_fp8x4(w[i], s, o);
          bf[2 * i] = o[0], bf[2 * i + 1] = o[1];
        }
      } else {
        uint32_t w[2];
        detail::load_words<2>(p, a.vector_loads, w);
        const uint32_t s2 = detail::block_scale_bf16x2(sbits, T::kE8m0);
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // k slots permuted within each 8 (same for A and B)
          uint32_t o[4];
          detail::dequant_fp4x8(w[i], s2, o);
          bf[4 * i] = o[0], bf[4 * i + 1] = o[1], bf[4 * i + 2] = o[2], bf[4 * i + 3] = o[3];
        }
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(tile + r * kLd + gk * kGranule);
    dst[0] = make_uint4(bf[0], bf[1], bf[2], bf[3]);
    dst[1] = make_uint4(bf[4], bf[5], bf[6], bf[7]);
  }
}

__device__ __forceinline__ uint32_t lds32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <BlockFormat F>
__global__ void __launch_bounds__(kThreads) qkv_gemm_kernel(const launch::QkvArgs a) {
  __shared__ alignas(16) uint16_t a_tile[kBM * kLd];
  __shared__ alignas(16) uint16_t b_tile[kBN * kLd];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int wm = warp / (kBN / kWarpN), wn = warp % (kBN / kWarpN);

  float acc[kMTiles][kNTiles][4] = {};
  for (int k0 = 0; k0 < a.K; k0 += kBK) {
    __syncthreads();  // the previous tile's fragments have been read
    stage_operand<F>(a.a, a.a_stride, a.a_scale, a.M, m0, k0, a, a_tile);
    stage_operand<F>(a.w, a.w_stride, a.w_scale, a.N, n0, k0, a, b_tile);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      uint32_t bf[kNTiles][2];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const uint16_t* p = b_tile + (wn * kWarpN + nt * 8 + g) * kLd + ks + 2 * c;
        bf[nt][0] = lds32(p);
        bf[nt][1] = lds32(p + 8);
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const uint16_t* p0 = a_tile + (wm * kWarpM + mt * 16 + g) * kLd + ks + 2 * c;
        const uint16_t* p1 = p0 + 8 * kLd;
        const uint32_t af[4] = {lds32(p0), lds32(p1), lds32(p0 + 8), lds32(p1 + 8)};
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) detail::mma_bf16_16x8x16(acc[mt][nt], af, bf[nt]);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const int m = m0 + wm * kWarpM + mt * 16 + g;
      const int n = n0 + wn * kWarpN + nt * 8 + 2 * c;
      detail::qkv_store(a, m, n, acc[mt][nt][0]);
      detail::qkv_store(a, m, n + 1, acc[mt][nt][1]);
      detail::qkv_store(a, m + 8, n, acc[mt][nt][2]);
      detail::qkv_store(a, m + 8, n + 1, acc[mt][nt][3]);
    }
  }
}

}  // namespace

Status launch::qkv_gemm(const QkvArgs& args, void* stream) {
  if (args.M == 0 || args.N == 0) return Status::Ok();
  const dim3 grid(unsigned(detail::ceil_div(args.N, kBN)), unsigned(detail::ceil_div(args.M, kBM)));
  const cudaStream_t s = detail::as_stream(stream);
  switch (BlockFormat(args.format)) {
    case BlockFormat::kNVFP4:
      qkv_gemm_kernel<BlockFormat::kNVFP4><<<grid, kThreads, 0, s>>>(args);
      break;
    case BlockFormat::kMXFP4:
      qkv_gemm_kernel<BlockFormat::kMXFP4><<<grid, kThreads, 0, s>>>(args);
      break;
    case BlockFormat::kMXFP8:
      qkv_gemm_kernel<BlockFormat::kMXFP8><<<grid, kThreads, 0, s>>>(args);
      break;
  }
  return detail::launch_status("qkv_gemm_kernel");
}

}  // namespace quantkv::cuda
