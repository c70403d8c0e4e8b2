// Fused QKV projection, decode path (M <= 16): the weight is read once, at memory speed. A warp
// owns 4 tiles of 8 weight rows (32 output columns) and a quarter of K; all M rows fit one m16
// tile. Per step each lane loads 16 contiguous bytes of each of its 4 weight rows (32 fp4 or 16
// fp8 values) with their block scales, a pass ahead of their use (see the kernel), dequantises
// them straight into B fragments of mma.m16n8k16.bf16, and reuses one
// dequantised A fragment (the activations, L1/L2-resident) for the 4 tiles. The MMA's k order
// is free (a dot product does not care), so a lane's values are mapped to the fragment's k
// slots in the order the dequantiser produces them, for A and B alike. The four K quarters are
// added in a fixed order through shared memory: the result does not depend on timing.
#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/host_headers.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/qkv_common.cuh"
#include "cuda/launch.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kTiles = 4;   // 8-column tiles per warp (one A fragment, 4 MMAs)
constexpr int kSplitK = 4;  // warps per block, each a quarter of K
constexpr int kThreads = kSplitK * 32;
constexpr int kColumns = kTiles * 8;  // output columns per block
constexpr int kUnroll = 2;  // steps of each weight row held in registers (loads in flight)
static_assert(launch::kQkvDecodeMaxRows == 16, "one m16 tile holds every row");

// One lane's view of one operand row: its bytes and its scales (the row part of the swizzled
// offset computed once), or nothing for rows past the end (they read as zeros).
struct RowRef {
  const uint8_t* data = nullptr;    // start of the row, or null
  const uint8_t* scales = nullptr;  // scale tensor + the row's base offset
};
__device__ __forceinline__ RowRef row_ref(const uint8_t* data, int64_t stride,
                                          const uint8_t* scales, int rows, int row, int kb_count) {
  if (row >= rows) return {};
  return {data + int64_t(row) * stride, scales + detail::swizzled_row_base(row, kb_count)};
}

// What one lane loads for one row and step: 16 data bytes from value k on and the scale bits
// they need, loaded together so that no scale is requested only when the dequantiser needs it.
// NVFP4 (32 values, blocks kb and kb + 1): both scale bytes, kb in the low byte; MX: one byte.
struct RawStep {
  uint32_t w[4];
  uint32_t s;
};

// The raw step of row r at value k (zeros past K or for a missing row). K is a multiple of 16,
// so a 16-value granule is wholly in range or wholly out; an fp4 step may hold only its first.
template <BlockFormat F, bool kVec>
__device__ __forceinline__ RawStep load_raw(const RowRef& r, int k, const launch::QkvArgs& a) {
  using T = detail::FormatTraits<F>;
  RawStep raw = {{0, 0, 0, 0}, 0};
  if (r.data == nullptr || k >= a.K) return raw;
  const uint8_t* p = r.data + (T::kFp8 ? k : k / 2);
  const bool whole = T::kFp8 || k + 32 <= a.K;  // fp4: both 16-value halves in range
  if (whole) {
    detail::load_words<4>(p, kVec, raw.w);
  } else {
    uint32_t half[2];
    detail::load_words<2>(p, kVec, half);
    raw.w[0] = half[0], raw.w[1] = half[1];
  }
  const uint8_t* sp = r.scales + detail::swizzled_col_offset(k / T::kSfv);
  if constexpr (T::kSfv == 16) {
    // k is a multiple of 32, so kb is even and kb + 1 sits in the next byte of the same group
    // of four (swizzled_col_offset): one 16-bit load when the scale bases are 2-byte aligned
    // (kVec; every row base is a multiple of 4). Without the second block its byte (padding,
    // which may hold anything) is not loaded and stays 0: a zero scale, so no 0 * NaN.
    if (!whole) {
      raw.s = *sp;
    } else if constexpr (kVec) {
      raw.s = *reinterpret_cast<const uint16_t*>(sp);
    } else {
      raw.s = uint32_t(sp[0]) | uint32_t(sp[1]) << 8;
    }
  } else {
    raw.s = *sp;
  }
  return raw;
}

// One step of one row -> bf16x2 words v[0..15] (fp8: v[0..7]), in the dequantiser's slot
// order. `valid`: the row exists and k < K (else zeros, whatever the raw bits).
template <BlockFormat F>
__device__ __forceinline__ void dequant_step(const RawStep& raw, bool valid, uint32_t (&v)[16]) {
  using T = detail::FormatTraits<F>;
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = 0;
  if (!valid) return;
  if constexpr (T::kFp8) {  // 16 values of one MX block
    const float s = detail::block_scale_value(uint8_t(raw.s), true);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t o[2];
      detail::dequant_fp8x4(raw.w[i], s, o);
      v[2 * i] = o[0], v[2 * i + 1] = o[1];
    }
  } else {  // 32 values: two 16-value halves (two NVFP4 blocks, or one MX block)
    const uint32_t s0 = detail::block_scale_bf16x2(uint8_t(raw.s), T::kE8m0);
    // NVFP4's second block: the high byte, left 0 by load_raw when the step holds only the
    // first block, and e4m3 0 is the bf16 pair 0: a zero scale on its zero data words.
    const uint32_t s1 = T::kSfv == 16 ? detail::block_scale_bf16x2(uint8_t(raw.s >> 8), false) : s0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t o[4];
      detail::dequant_fp4x8(raw.w[i], i < 2 ? s0 : s1, o);
      v[4 * i] = o[0], v[4 * i + 1] = o[1], v[4 * i + 2] = o[2], v[4 * i + 3] = o[3];
    }
  }
}
// kVec: every row starts 16-byte aligned and both scale tensors 2-byte aligned (16-byte data
// loads, 16-bit loads of NVFP4 scale pairs), else byte loads. At least 3 blocks (12 warps) per
// SM keep enough weight loads in flight; that allows up to 170 registers, so nothing spills.
// Pipeline: each lane holds kUnroll steps of its 4 weight rows (data and scales) in registers.
// A step's registers are refilled with the same step one pass (kStride) later as soon as they
// are dequantised, before that tile's MMAs, so the next pass's weight loads are in flight while
// this pass computes. The MMAs into acc[j] keep their order (passes, steps, then MMAs, all
// ascending), so every sum is the one an unpipelined loop forms.
template <BlockFormat F, bool kVec>
__global__ void __launch_bounds__(kThreads, 3) qkv_decode_kernel(const launch::QkvArgs a) {
  using T = detail::FormatTraits<F>;
  constexpr int kValuesPerLane = T::kFp8 ? 16 : 32;  // per row and step: 16 bytes
  constexpr int kMmas = kValuesPerLane / 4;          // 4 k values of the lane per MMA
  constexpr int kSpan = 4 * kValuesPerLane;          // k covered by one warp step
  constexpr int kStepGap = kSplitK * kSpan;          // k between a warp's consecutive steps
  constexpr int kStride = kUnroll * kStepGap;        // k covered by one pass of kUnroll steps
  __shared__ float partial[kSplitK][kTiles][32][4];

  const int lane = threadIdx.x % 32, part = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const int col0 = blockIdx.x * kColumns;  // tile j of this warp: weight rows col0 + 8j + g
  const int kb_count = a.K / T::kSfv;
  RowRef wrow[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
    wrow[j] = row_ref(a.w, a.w_stride, a.w_scale, a.N, col0 + 8 * j + g, kb_count);
  const RowRef arow0 = row_ref(a.a, a.a_stride, a.a_scale, a.M, g, kb_count);
  const RowRef arow1 = row_ref(a.a, a.a_stride, a.a_scale, a.M, g + 8, kb_count);

  RawStep wraw[kUnroll][kTiles];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {  // the first pass
    const int k = part * kSpan + u * kStepGap + c * kValuesPerLane;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) wraw[u][j] = load_raw<F, kVec>(wrow[j], k, a);
  }
  float acc[kTiles][4] = {};
  for (int k_base = part * kSpan; k_base < a.K; k_base += kStride) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k_base + u * kStepGap >= a.K) break;  // warp-uniform; every later step is past K too
      const int k = k_base + u * kStepGap + c * kValuesPerLane;
      // The activations (all M rows in one m16 tile: rows g and g + 8), L1/L2-resident.
      uint32_t a0[16], a1[16];
      dequant_step<F>(load_raw<F, kVec>(arow0, k, a), arow0.data != nullptr && k < a.K, a0);
      dequant_step<F>(load_raw<F, kVec>(arow1, k, a), arow1.data != nullptr && k < a.K, a1);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        uint32_t bw[16];
        dequant_step<F>(wraw[u][j], wrow[j].data != nullptr && k < a.K, bw);
        wraw[u][j] = load_raw<F, kVec>(wrow[j], k + kStride, a);  // the next pass, issued early
#pragma unroll
        for (int s = 0; s < kMmas; ++s) {
          // Lane words 2s and 2s+1 are fragment k pairs (2c, 2c+1) and (2c+8, 2c+9): the same
          // words of the A rows g and g+8 and of the B row, so A and B slots line up.
          const uint32_t af[4] = {a0[2 * s], a1[2 * s], a0[2 * s + 1], a1[2 * s + 1]};
          const uint32_t bf[2] = {bw[2 * s], bw[2 * s + 1]};
          detail::mma_bf16_16x8x16(acc[j], af, bf);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[part][j][lane][i] = acc[j][i];
  }
  __syncthreads();
  // Warp `part` finishes tile `part`: the four K quarters in order 0..3.
  const int j = part;
  float sum[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[i] = partial[0][j][lane][i];
#pragma unroll
    for (int p = 1; p < kSplitK; ++p) sum[i] += partial[p][j][lane][i];
  }
  const int n = col0 + 8 * j + 2 * c;
  detail::qkv_store(a, g, n, sum[0]);
  detail::qkv_store(a, g, n + 1, sum[1]);
  detail::qkv_store(a, g + 8, n, sum[2]);
  detail::qkv_store(a, g + 8, n + 1, sum[3]);
}
static_assert(kSplitK == kTiles, "each warp finishes one tile");

template <BlockFormat F>
Status launch_decode(const launch::QkvArgs& args, unsigned blocks, cudaStream_t s) {
  if (args.vector_loads) {
    qkv_decode_kernel<F, true><<<blocks, kThreads, 0, s>>>(args);
  } else {
    qkv_decode_kernel<F, false><<<blocks, kThreads, 0, s>>>(args);
  }
  return detail::launch_status("qkv_decode_kernel");
}

}  // namespace

Status launch::qkv_decode(const QkvArgs& args, void* stream) {
  if (args.M == 0 || args.N == 0) return Status::Ok();
  const unsigned blocks = unsigned(detail::ceil_div(args.N, kColumns));
  const cudaStream_t s = detail::as_stream(stream);
  switch (BlockFormat(args.format)) {
    case BlockFormat::kNVFP4:
      return launch_decode<BlockFormat::kNVFP4>(args, blocks, s);
    case BlockFormat::kMXFP4:
      return launch_decode<BlockFormat::kMXFP4>(args, blocks, s);
    case BlockFormat::kMXFP8:
      return launch_decode<BlockFormat::kMXFP8>(args, blocks, s);
  }
  return {StatusCode::kInternal, "qkv_decode: unknown format"};  // validated before
}

}  // namespace quantkv::cuda
