// Indexer scores on FP8 tensor cores (contract §3):
//   score(t, j) = k_scale(j) * sum_h relu(q[t,h,:] . k[j,:]) * q_s[t,h]
// One block = one tile of 128 keys x one group of up to 8 tokens of one sequence. The K tile
// (read through the page table) is staged once in shared memory and reused by every token of
// the group; per token the [64 heads x D] x [D x 128 keys] product runs on tensor cores with
// fp32 accumulation, then each warp reduces its 16 keys over heads.
// Operands are staged as fp16 (e4m3 is a subset of fp16, so the products stay exact) and
// multiplied with mma.m16n8k16.f16: on sm_90 the e4m3 form of mma.sync is itself lowered to
// an e4m3->f16 conversion plus HMMA.16816 (seen in the SASS), so converting once per staged
// element instead of once per fragment and m-tile removes most of the conversion work.
// (Hopper's native FP8 rate needs wgmma; see docs/cuda.md.) Decode batches (one token per sequence)
// get one block per key tile, so a long context is spread over the whole GPU. Scores of keys >= the
// token's bound are not written.
#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/host_headers.cuh"
#include "cuda/common/kernel_math.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/common/paged.cuh"
#include "cuda/common/smem_opt_in.hpp"
#include "cuda/launch.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kKeysPerWarp = 16;                     // two n8 tiles
constexpr int kKeysPerTile = kWarps * kKeysPerWarp;  // 128
constexpr int kHeadsPerPass = 64;                    // four m16 tiles
constexpr int kMTiles = kHeadsPerPass / 16;
constexpr int kNTiles = kKeysPerWarp / 8;
static_assert(kKeysPerTile == 128 && kMTiles == 4 && kNTiles == 2);

struct SmemLayout {
  int dpad;  // D rounded up to the MMA's k (16)
  int ld;    // bytes per staged fp16 row: 2 * dpad + 16, so rows start 4 banks apart
  __host__ __device__ explicit SmemLayout(int dim)
      : dpad((dim + 15) / 16 * 16), ld(2 * dpad + 16) {}
  __host__ __device__ int k_bytes() const { return kKeysPerTile * ld; }
  __host__ __device__ int q_bytes() const { return kHeadsPerPass * ld; }
  __host__ __device__ int total() const {
    return k_bytes() + q_bytes() + (kHeadsPerPass + kKeysPerTile) * int(sizeof(float));
  }
};

// 16 e4m3 bytes -> 16 fp16 values (32 bytes) at dst.
__device__ __forceinline__ void store_as_f16(uint4 v, uint8_t* dst) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t h[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[2 * i] = detail::e4m3x2_to_f16x2(uint16_t(w[i] & 0xFFFFu));
    h[2 * i + 1] = detail::e4m3x2_to_f16x2(uint16_t(w[i] >> 16));
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

// Stages keys tile0 .. tile0+127 (zeros at and beyond `bound`) and their scales.
__device__ void load_key_tile(const launch::IndexerScoresArgs& a, const SmemLayout& L, int b,
                              int tile0, int bound, uint8_t* k_tile, float* k_scale) {
  const int chunks_per_row = L.dpad / 16;
  for (int idx = threadIdx.x; idx < kKeysPerTile * chunks_per_row; idx += kThreads) {
    const int key = idx / chunks_per_row, ch = idx % chunks_per_row;
    const int pos = tile0 + key;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (pos < bound && ch * 16 < a.dim) {
      const uint32_t page = detail::page_of(a.k, b, pos);
      if (page < a.k.num_blocks) {  // validated on the host; never read past the cache anyway
        v = *reinterpret_cast<const uint4*>(detail::key_row(a.k, page, pos % a.k.page_size) +
                                            ch * 16);
      }
    }
    store_as_f16(v, k_tile + key * L.ld + ch * 32);
  }
  for (int key = threadIdx.x; key < kKeysPerTile; key += kThreads) {
    const int pos = tile0 + key;
    float s = 0.0f;
    if (pos < bound) {
      const uint32_t page = detail::page_of(a.k, b, pos);
      if (page < a.k.num_blocks) {
        s = *detail::key_scale(a.k, page, pos % a.k.page_size);
      }
    }
    k_scale[key] = s;
  }
}

// Stages heads h0 .. h0+63 of token t (zero rows and zero weights beyond H).
__device__ void load_query_tile(const launch::IndexerScoresArgs& a, const SmemLayout& L, int t,
                                int h0, uint8_t* q_tile, float* w) {
  const int chunks_per_row = L.dpad / 16;
  for (int idx = threadIdx.x; idx < kHeadsPerPass * chunks_per_row; idx += kThreads) {
    const int hh = idx / chunks_per_row, ch = idx % chunks_per_row;
    const int h = h0 + hh;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (h < a.heads && ch * 16 < a.dim) {
      v = *reinterpret_cast<const uint4*>(a.q + (int64_t(t) * a.heads + h) * a.dim + ch * 16);
    }
    store_as_f16(v, q_tile + hh * L.ld + ch * 32);
  }
  for (int hh = threadIdx.x; hh < kHeadsPerPass; hh += kThreads) {
    const int h = h0 + hh;
    w[hh] = h < a.heads ? a.q_s[int64_t(t) * a.qs_stride0 + int64_t(h) * a.qs_stride1] : 0.0f;
  }
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// One warp: logits of 64 heads x its 16 keys, then the ReLU-weighted sum over the heads.
// part[nt][e] = the sum for key column 2c+e of n-tile nt (identical in all lanes of column c).
__device__ void warp_head_pass(const SmemLayout& L, const uint8_t* k_tile, const uint8_t* q_tile,
                               const float* w, float (&part)[kNTiles][2]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  float acc[kMTiles][kNTiles][4] = {};
  for (int kk = 0; kk < 2 * L.dpad; kk += 32) {  // 16 fp16 values (32 bytes) per MMA step
    uint32_t bf[kNTiles][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const uint8_t* row = k_tile + (warp * kKeysPerWarp + nt * 8 + g) * L.ld + kk + 4 * c;
      bf[nt][0] = lds32(row);       // k 2c, 2c+1
      bf[nt][1] = lds32(row + 16);  // k 2c+8, 2c+9
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const uint8_t* r0 = q_tile + (mt * 16 + g) * L.ld + kk + 4 * c;
      const uint8_t* r1 = r0 + 8 * L.ld;
      const uint32_t af[4] = {lds32(r0), lds32(r1), lds32(r0 + 16), lds32(r1 + 16)};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) detail::mma_f16_16x8x16(acc[mt][nt], af, bf[nt]);
    }
  }
  // Fixed order: heads of one lane (m-tiles, then rows g and g+8), then a butterfly over g.
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float s = 0.0f;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        s += detail::indexer_relu(acc[mt][nt][e]) * w[mt * 16 + g];
        s += detail::indexer_relu(acc[mt][nt][2 + e]) * w[mt * 16 + g + 8];
      }
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 4);
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 8);
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 16);
      part[nt][e] = s;
    }
  }
}

// __grid_constant__: the arguments (with up to 64 inline token groups) are read in place from
// the parameter space, even with a run-time index, instead of being copied to local memory.
__global__ void __launch_bounds__(kThreads)
    indexer_scores_kernel(const __grid_constant__ launch::IndexerScoresArgs a) {
  const launch::TokenGroup grp = a.groups ? a.groups[blockIdx.x] : a.inline_groups[blockIdx.x];
  const int tile0 = blockIdx.y * kKeysPerTile;
  const int max_bound = grp.first_bound + (grp.count - 1) * grp.bound_step;
  if (tile0 >= max_bound) return;  // block-uniform: beyond every token's bound

  extern __shared__ uint4 smem[];  // 16-byte aligned
  const SmemLayout L(a.dim);
  uint8_t* k_tile = reinterpret_cast<uint8_t*>(smem);
  uint8_t* q_tile = k_tile + L.k_bytes();
  float* w = reinterpret_cast<float*>(q_tile + L.q_bytes());
  float* k_scale = w + kHeadsPerPass;

  load_key_tile(a, L, grp.b, tile0, max_bound, k_tile, k_scale);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = 0; i < grp.count; ++i) {
    const int bound = grp.first_bound + i * grp.bound_step;
    if (tile0 >= bound) continue;  // block-uniform
    const int t = grp.t_begin + i;
    float score[kNTiles][2] = {};
    for (int h0 = 0; h0 < a.heads; h0 += kHeadsPerPass) {
      __syncthreads();  // the previous pass is done with q_tile / w (and the K tile is staged)
      load_query_tile(a, L, t, h0, q_tile, w);
      __syncthreads();
      float part[kNTiles][2];
      warp_head_pass(L, k_tile, q_tile, w, part);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        score[nt][0] += part[nt][0];
        score[nt][1] += part[nt][1];
      }
    }
    if (lane < 4) {  // g == 0: column c = lane holds keys 2c, 2c+1 of each n-tile
      float* out = a.scores + int64_t(t - a.row_base) * a.score_stride;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = warp * kKeysPerWarp + nt * 8 + 2 * lane + e;
          if (tile0 + key < bound) out[tile0 + key] = score[nt][e] * k_scale[key];
        }
      }
    }
  }
}

}  // namespace

Status launch::indexer_scores(const IndexerScoresArgs& args, void* stream) {
  if (args.num_groups == 0 || args.max_key_tiles == 0) return Status::Ok();
  const int smem = SmemLayout(args.dim).total();
  // The limit for the largest D, raised once per device: never per call (a concurrent call
  // with a smaller D would lower it before this launch).
  static detail::SharedMemoryOptIn opt_in(reinterpret_cast<const void*>(&indexer_scores_kernel),
                                          SmemLayout(kIndexerMaxDim).total(),
                                          "indexer_scores_kernel");
  QUANTKV_RETURN_IF_ERROR(opt_in.ensure(smem));
  const dim3 grid(unsigned(args.num_groups), unsigned(args.max_key_tiles));
  indexer_scores_kernel<<<grid, kThreads, smem, detail::as_stream(stream)>>>(args);
  return detail::launch_status("indexer_scores_kernel");
}

}  // namespace quantkv::cuda
