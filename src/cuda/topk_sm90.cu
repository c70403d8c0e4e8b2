// Per-row top-k of the indexer scores with contract §3's ordering (score descending, index
// ascending, NaN below every number, -1 tail). One block per row:
//   1. radix select over the order-preserving 32-bit keys (4 passes of 8 bits, shared-memory
//      histograms) finds the exact k-th key and how many of the keys equal to it are taken;
//   2. one pass in index order collects every key above it and the first `take_equal` keys
//      equal to it (an ordered block scan, so ties go to the smaller index);
//   3. a bitonic sort of the min(top_k, n) (key, index) pairs in shared memory.
// The selection buffer holds exactly min(top_k, n) <= top_k pairs, sized from top_k before
// launch, so no candidate buffer can overflow whatever the score distribution.
#include <cuda_runtime.h>

#include "cuda/common/cuda_status.hpp"
#include "cuda/common/host_headers.cuh"
#include "cuda/common/kernel_math.hpp"
#include "cuda/common/paged.cuh"
#include "cuda/common/smem_opt_in.hpp"
#include "cuda/launch.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kBins = 256;

__host__ __device__ inline int pow2_ceil(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

template <int kThreads>
struct TopkShared {
  static_assert(kThreads >= kBins && kThreads % 32 == 0);
  uint32_t hist[kBins];
  uint32_t warp_totals[kThreads / 32];
  uint32_t greater_count;  // next free slot for keys above the threshold
  uint32_t prefix;         // the k-th key, built 8 bits per pass
  uint32_t remaining;      // how many of the keys matching `prefix` are still to take
  uint32_t equal_count;    // after the last pass: how many keys equal the k-th key
};

// Thread `bin` (< 256) gets the number of keys in bins >= bin: a suffix sum by warp shuffles
// and the totals of the warps above (whole warps: threads 0..255 are warps 0..7).
template <int kThreads>
__device__ uint32_t bins_at_or_above(uint32_t own, TopkShared<kThreads>& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t v = own;
  if (threadIdx.x < kBins) {
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const uint32_t u = __shfl_down_sync(0xFFFFFFFFu, v, off);
      if (lane + off < 32) v += u;
    }
    if (lane == 0) sh.warp_totals[warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < kBins) {
    for (int w = warp + 1; w < kBins / 32; ++w) v += sh.warp_totals[w];
  }
  return v;
}

// Radix select: on return sh.prefix is the k-th largest key and sh.remaining the number of
// keys equal to it that belong to the top k.
template <int kThreads>
__device__ void radix_select(const float* row, int n, int k, TopkShared<kThreads>& sh) {
  if (threadIdx.x == 0) {
    sh.prefix = 0;
    sh.remaining = uint32_t(k);
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = detail::ordered_score_key(row[i]);
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 0xFFu], 1u);
    }
    __syncthreads();
    const uint32_t own = threadIdx.x < kBins ? sh.hist[threadIdx.x] : 0u;
    const uint32_t above = bins_at_or_above(own, sh) - own;  // keys in bins above this one
    const uint32_t remaining = sh.remaining;
    __syncthreads();  // everyone has read prefix / remaining / hist / warp totals
    if (threadIdx.x < kBins && above < remaining && above + own >= remaining) {
      sh.prefix = prefix | (uint32_t(threadIdx.x) << shift);
      sh.remaining = remaining - above;
      sh.equal_count = own;  // after the last pass: the keys equal to the k-th key
    }
    mask |= 0xFFu << shift;
    __syncthreads();
  }
}

// Exclusive rank of `flag` among the block's threads (in thread order) and the block total.
template <int kThreads>
__device__ uint32_t block_rank(bool flag, TopkShared<kThreads>& sh, uint32_t* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, flag);
  const uint32_t in_warp = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) sh.warp_totals[warp] = __popc(ballot);
  __syncthreads();
  uint32_t before = 0, sum = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) before += sh.warp_totals[w];
    sum += sh.warp_totals[w];
  }
  __syncthreads();  // warp_totals may be rewritten by the next call
  *total = sum;
  return before + in_warp;
}

// Collects the top `k` of row[0..n) into sel[0..k) (unordered).
template <int kThreads>
__device__ void collect(const float* row, int n, int k, TopkShared<kThreads>& sh, uint64_t* sel) {
  if (threadIdx.x == 0) sh.greater_count = 0;
  __syncthreads();
  const uint32_t kth = sh.prefix, take_equal = sh.remaining;
  if (take_equal == sh.equal_count) {
    // Every key equal to the k-th belongs to the result (the usual case: a unique k-th
    // score): the k keys >= kth, in any slot order (the sort orders them).
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = detail::ordered_score_key(row[i]);
      if (key >= kth)
        sel[atomicAdd(&sh.greater_count, 1u)] = detail::topk_composite(key, uint32_t(i));
    }
    return;
  }
  // Ties at the threshold: only the first take_equal equal keys (smallest indices) belong.
  const uint32_t greater_total = uint32_t(k) - take_equal;
  uint32_t equal_seen = 0;
  for (int base = 0; base < n; base += kThreads) {  // every thread runs every iteration
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? detail::ordered_score_key(row[i]) : 0u;
    const bool equal = i < n && key == kth;
    if (i < n && key > kth) {
      sel[atomicAdd(&sh.greater_count, 1u)] = detail::topk_composite(key, uint32_t(i));
    }
    uint32_t equal_in_chunk = 0;
    const uint32_t rank = equal_seen + block_rank(equal, sh, &equal_in_chunk);
    if (equal && rank < take_equal)
      sel[greater_total + rank] = detail::topk_composite(key, uint32_t(i));
    equal_seen += equal_in_chunk;
  }
}

// Descending bitonic sort of sel[0..p), p a power of two.
template <int kThreads>
__device__ void bitonic_sort_desc(uint64_t* sel, int p) {
  for (int size = 2; size <= p; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < p; i += kThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const uint64_t x = sel[i], y = sel[j];
          const bool descending = (i & size) == 0;
          if (descending ? x < y : x > y) {
            sel[i] = y;
            sel[j] = x;
          }
        }
      }
      __syncthreads();
    }
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) indexer_topk_kernel(const launch::TopkArgs a) {
  extern __shared__ uint64_t sel[];  // [pow2_ceil(top_k)]
  __shared__ TopkShared<kThreads> sh;
  const int t = a.row_base + int(blockIdx.x);
  const float* row = a.scores + int64_t(blockIdx.x) * a.score_stride;
  const int n = detail::indexer_key_bound(a.offs, a.cache_lengths, a.cache_lengths_stride, a.batch,
                                          uint32_t(t), a.causal);
  const int k = n < a.top_k ? n : a.top_k;
  const int p = pow2_ceil(k);

  if (n <= a.top_k) {  // every key is selected
    for (int i = threadIdx.x; i < n; i += kThreads) {
      sel[i] = detail::topk_composite(detail::ordered_score_key(row[i]), uint32_t(i));
    }
  } else {
    radix_select<kThreads>(row, n, k, sh);
    collect<kThreads>(row, n, k, sh, sel);
  }
  for (int i = k + threadIdx.x; i < p; i += kThreads) sel[i] = 0;  // below every real pair
  __syncthreads();
  bitonic_sort_desc<kThreads>(sel, p);

  int32_t* out = a.out + int64_t(t) * a.out_stride0;
  const int32_t b = a.global_slots ? detail::sequence_of_row(a.offs, a.batch, uint32_t(t)) : 0;
  for (int i = threadIdx.x; i < a.top_k; i += kThreads) {
    int32_t v = i < k ? int32_t(detail::topk_composite_index(sel[i])) : -1;
    if (a.global_slots &&
        v >= 0) {  // page * page_size + slot (num_blocks * page_size fits int32: host-checked)
      v = int32_t(int64_t(detail::page_of(a.keys, b, v)) * a.keys.page_size + v % a.keys.page_size);
    }
    out[int64_t(i) * a.out_stride1] = v;
  }
}

template <int kThreads>
Status launch_topk(const launch::TopkArgs& a, cudaStream_t stream) {
  const int smem = pow2_ceil(a.top_k < a.max_bound ? a.top_k : a.max_bound) * int(sizeof(uint64_t));
  // The limit for the largest top_k, raised once per device (one instance per block size):
  // never per call, where a concurrent call with a smaller top_k would lower it.
  static detail::SharedMemoryOptIn opt_in(
      reinterpret_cast<const void*>(&indexer_topk_kernel<kThreads>),
      pow2_ceil(launch::kIndexerMaxTopK) * int(sizeof(uint64_t)), "indexer_topk_kernel");
  QUANTKV_RETURN_IF_ERROR(opt_in.ensure(smem));
  indexer_topk_kernel<kThreads><<<unsigned(a.rows), kThreads, smem, stream>>>(a);
  return detail::launch_status("indexer_topk_kernel");
}

}  // namespace

Status launch::indexer_topk(const TopkArgs& args, void* stream) {
  if (args.rows == 0) return Status::Ok();
  // Few long rows (decode): the widest block, to keep more loads in flight per row.
  if (args.rows < 64 && args.max_bound > 8192)
    return launch_topk<1024>(args, detail::as_stream(stream));
  return launch_topk<512>(args, detail::as_stream(stream));
}

}  // namespace quantkv::cuda
