// Indexer K store (contract §5) on the GPU: one warp per new token. The warp's max |x| (exact,
// order-free) gives the token's scale through the shared recipe; each value is stored as
// e4m3(x / s) at position cache_len[b] + i of the paged K cache, and s in its scales tensor.
#include <cuda_runtime.h>

#include "core/recipes.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/common/host_headers.cuh"
#include "cuda/common/kernel_math.hpp"
#include "cuda/common/paged.cuh"
#include "cuda/launch.hpp"
#include "quantkv/formats.hpp"

namespace quantkv::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float load_k(const launch::KStoreArgs& a, int64_t t, int64_t d) {
  const int64_t off = t * a.k_stride0 + d * a.k_stride1;
  return a.k_bf16 ? bf16_to_float(static_cast<const uint16_t*>(a.k)[off])
                  : static_cast<const float*>(a.k)[off];
}

__global__ void __launch_bounds__(kWarps * 32) indexer_k_store_kernel(const launch::KStoreArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= a.T) return;  // warp-uniform
  float amax = 0.0f;
  for (int d = lane; d < a.D; d += 32) amax = recipe::amax_update(amax, load_k(a, t, d));
  for (int off = 16; off > 0; off /= 2) {
    amax = recipe::amax_update(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  }
  const float s = recipe::fp8_token_scale(amax, a.power_of_two);

  const int32_t b = detail::sequence_of_row(a.offs, a.batch, uint32_t(t));
  const int64_t pos = int64_t(detail::cache_length(a.cache, b)) + (t - int64_t(a.offs[b]));
  const uint32_t page = detail::page_of(a.cache, b, pos);
  if (page >= a.cache.num_blocks) return;  // validated on the host; never write past the cache
  const int64_t slot = pos % a.cache.page_size;
  uint8_t* dst = detail::key_row(a.cache, page, slot);
  for (int d = lane; d < a.D; d += 32)
    dst[d] = recipe::fp8_token_quantize_value(load_k(a, t, d), s);
  if (lane == 0) *detail::key_scale(a.cache, page, slot) = s;
}

}  // namespace

Status launch::indexer_k_store(const KStoreArgs& args, void* stream) {
  if (args.T == 0) return Status::Ok();
  const unsigned blocks = unsigned(detail::ceil_div(args.T, kWarps));
  indexer_k_store_kernel<<<blocks, kWarps * 32, 0, detail::as_stream(stream)>>>(args);
  return detail::launch_status("indexer_k_store_kernel");
}

}  // namespace quantkv::cuda
