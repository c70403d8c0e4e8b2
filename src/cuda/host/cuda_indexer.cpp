// CUDA entry points of the indexer (contract §3) and the indexer K store (contract §5): the shared
// validation (ops/validate.hpp), the CUDA limits and the host copies of the ragged metadata,
// then planning (token groups, score chunks within ctx.scores_budget_bytes) and the launches
// (src/cuda/indexer_sm90.cu, topk_sm90.cu, indexer_k_store_sm90.cu).
#if defined(QUANTKV_WITH_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/engine_layout_view.hpp"
#include "core/view_checks.hpp"
#include "cuda/common/cuda_status.hpp"
#include "cuda/common/kernel_math.hpp"
#include "cuda/host/cuda_validate.hpp"
#include "ops/validate.hpp"

namespace quantkv::cuda {
namespace {

using detail::str;
using quantkv::detail::as_collection;

constexpr int kGroupTokens = 8;    // tokens of one sequence sharing a staged K tile
constexpr int kKeysPerTile = 128;  // indexer_sm90.cu
constexpr int64_t kMaxDim =
    launch::kIndexerMaxDim;  // shared-memory staging of K and Q rows as fp16
static_assert(kMaxTopK == launch::kIndexerMaxTopK,
              "the top-k kernel's shared memory is sized from it");

// The scores kernel stages K and Q rows with 16-byte loads into shared memory.
Status check_indexer_kernel_limits(const PagedKVCacheCollection& c, int64_t dim) {
  if (dim % 16 != 0 || dim > kMaxDim) {
    return {StatusCode::kUnimplemented,
            "D: the CUDA indexer needs D % 16 == 0 and D <= " + str(kMaxDim) + ", got " + str(dim)};
  }
  return detail::check_aligned("k_collection.blocks", c.blocks, 16);
}

// Key bound of every token (contract §3), from the host copies with the kernels' own formula.
std::vector<int32_t> token_bounds(const HostRagged& host, MaskType mask) {
  const int64_t batch = host.cache_lengths.shape[0];
  std::vector<uint32_t> offs(static_cast<std::size_t>(batch + 1));
  std::vector<uint32_t> lengths(static_cast<std::size_t>(batch));
  for (int64_t b = 0; b <= batch; ++b) offs[b] = host.input_row_offsets(b);
  for (int64_t b = 0; b < batch; ++b) lengths[b] = host.cache_lengths(b);
  std::vector<int32_t> bound(offs[batch]);
  for (uint32_t t = 0; t < offs[batch]; ++t) {
    bound[t] = detail::indexer_key_bound(offs.data(), lengths.data(), 1, int32_t(batch), t,
                                         mask == MaskType::kCausal);
  }
  return bound;
}

// A run of tokens whose scores fit the budget together: rows [t_begin, t_end), row stride
// `stride` floats, groups [group_begin, group_end) of the plan's group list. The stride is
// 64-bit: a bound may be 2^31 - 1 keys, and rounding it up to a multiple of 4 passes int32.
struct Chunk {
  int32_t t_begin, t_end;
  int64_t stride;
  int32_t max_bound, group_begin, group_end;
};

Status plan_chunks(const HostRagged& host, MaskType mask, const std::vector<int32_t>& bound,
                   std::size_t budget_bytes, std::vector<launch::TokenGroup>* groups,
                   std::vector<Chunk>* chunks) {
  const int64_t batch = host.cache_lengths.shape[0];
  std::vector<int32_t> seq(bound.size());
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(seq.begin() + host.input_row_offsets(b), seq.begin() + host.input_row_offsets(b + 1),
              int32_t(b));
  }
  const int32_t total = int32_t(bound.size());
  int32_t t = 0;
  while (t < total) {
    Chunk ch{t, t, 0, 0, int32_t(groups->size()), 0};
    while (ch.t_end < total) {  // grow the chunk by one token while it fits
      const int32_t max_bound = std::max(ch.max_bound, bound[ch.t_end]);
      const int64_t stride = (int64_t(max_bound) + 3) / 4 * 4;
      // rows * stride * 4 bytes <= budget, tested without forming the product (it could wrap).
      const uint64_t row_bytes = uint64_t(stride) * 4;
      const uint64_t rows = uint64_t(ch.t_end) - uint64_t(ch.t_begin) + 1;  // t_end >= t_begin
      if (row_bytes != 0 && rows > budget_bytes / row_bytes) break;
      ch.max_bound = max_bound;
      ch.stride = stride;
      ++ch.t_end;
    }
    if (ch.t_end == ch.t_begin) {
      return {StatusCode::kResourceExhausted,
              "ctx.scores_budget_bytes: " + str(int64_t(budget_bytes)) +
                  " bytes cannot hold one "
                  "row of " +
                  str(bound[t]) + " scores (token " + str(t) + ")"};
    }
    for (int32_t g = ch.t_begin; g < ch.t_end;) {  // groups: same sequence, <= 8 tokens
      const int32_t b = seq[g];
      const int32_t end =
          std::min({g + kGroupTokens, ch.t_end, int32_t(host.input_row_offsets(b + 1))});
      groups->push_back({b, g, end - g, bound[g], mask == MaskType::kCausal ? 1 : 0});
      g = end;
    }
    ch.group_end = int32_t(groups->size());
    chunks->push_back(ch);
    t = ch.t_end;
  }
  return Status::Ok();
}

// One stream-ordered device allocation, freed (stream-ordered) when it goes out of scope.
class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    status_ = detail::from_cuda(cudaMallocAsync(&ptr_, bytes, stream), "cudaMallocAsync workspace");
  }
  ~StreamBuffer() {
    if (ptr_) (void)cudaFreeAsync(ptr_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  const Status& status() const { return status_; }
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  Status status_;
};

std::size_t align_up(std::size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

namespace {

// The CUDA backend's own limits on the tensors (after the shared checks): q contiguous and
// 16-byte aligned, top_k within the top-k kernel's, int32 sizes.
Status check_indexer_tensor_limits(const TensorView<int32_t, 2>& output_indices,
                                   const TensorView<const float8_e4m3fn, 3>& q) {
  QUANTKV_RETURN_IF_ERROR(
      check_contiguous("q", "[T, H, D]", q, {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t top_k = output_indices.shape[1];
  if (top_k > kMaxTopK) {
    return {StatusCode::kUnimplemented, "output_indices: the CUDA backend supports top_k <= " +
                                            str(kMaxTopK) + ", got " + str(top_k)};
  }
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("q.shape[0] (T)", q.shape[0]));
  QUANTKV_RETURN_IF_ERROR(detail::check_int32("q.numel()", q.numel()));
  return detail::check_aligned("q", q.data, 16);
}

// Plans the chunks on the host copies and launches scores and top-k over `keys` (validated).
Status launch_indexer(TensorView<int32_t, 2> output_indices, TensorView<const float8_e4m3fn, 3> q,
                      TensorView<const float, 2> q_s,
                      TensorView<const uint32_t, 1> input_row_offsets,
                      const launch::IndexerKeyRows& keys, int64_t batch, MaskType mask,
                      const HostRagged& host, const Context& ctx, IndexOutput output) {
  const int64_t tokens = q.shape[0], heads = q.shape[1], dim = q.shape[2],
                top_k = output_indices.shape[1];
  if (tokens == 0) return Status::Ok();

  // ---- plan on the host copies
  const std::vector<int32_t> bound = token_bounds(host, mask);
  std::vector<launch::TokenGroup> groups;
  std::vector<Chunk> chunks;
  QUANTKV_RETURN_IF_ERROR(
      plan_chunks(host, mask, bound, ctx.scores_budget_bytes, &groups, &chunks));
  std::size_t score_bytes = 0;
  for (const Chunk& ch : chunks) {
    score_bytes = std::max(score_bytes, std::size_t(ch.t_end - ch.t_begin) * ch.stride * 4);
    if (detail::ceil_div(ch.max_bound, kKeysPerTile) > 65535) {
      return {StatusCode::kUnimplemented, "k_collection: more than 65535 * 128 keys per sequence"};
    }
  }

  // ---- workspace: [groups | scores], stream-ordered. Chunks of up to 64 groups (every
  // decode batch of up to 64 sequences) pass them in the kernel parameters instead.
  bool upload_groups = false;
  for (const Chunk& ch : chunks)
    upload_groups |= ch.group_end - ch.group_begin > launch::kInlineGroups;
  const cudaStream_t stream = detail::as_stream(ctx.cuda_stream);
  const std::size_t group_bytes =
      upload_groups ? align_up(groups.size() * sizeof(launch::TokenGroup)) : 0;
  StreamBuffer ws(group_bytes + score_bytes, stream);
  QUANTKV_RETURN_IF_ERROR(ws.status());
  auto* d_groups = reinterpret_cast<launch::TokenGroup*>(ws.get());
  auto* d_scores = reinterpret_cast<float*>(ws.get() + group_bytes);
  if (upload_groups) {  // a pageable source: the copy is staged before cudaMemcpyAsync returns
    QUANTKV_RETURN_IF_ERROR(detail::from_cuda(
        cudaMemcpyAsync(d_groups, groups.data(), groups.size() * sizeof(launch::TokenGroup),
                        cudaMemcpyHostToDevice, stream),
        "indexer: groups upload"));
  }

  for (const Chunk& ch : chunks) {
    launch::IndexerScoresArgs s;
    s.q = reinterpret_cast<const uint8_t*>(q.data);
    s.q_s = q_s.data;
    s.qs_stride0 = q_s.strides[0];
    s.qs_stride1 = q_s.strides[1];
    s.heads = int32_t(heads);
    s.dim = int32_t(dim);
    s.k = keys;
    s.num_groups = ch.group_end - ch.group_begin;
    if (upload_groups) {
      s.groups = d_groups + ch.group_begin;
    } else {
      std::copy(groups.begin() + ch.group_begin, groups.begin() + ch.group_end, s.inline_groups);
    }
    s.max_key_tiles = int32_t(detail::ceil_div(ch.max_bound, kKeysPerTile));
    s.scores = d_scores;
    s.score_stride = ch.stride;
    s.row_base = ch.t_begin;
    QUANTKV_RETURN_IF_ERROR(launch::indexer_scores(s, ctx.cuda_stream));

    launch::TopkArgs k;
    k.scores = d_scores;
    k.score_stride = ch.stride;
    k.offs = input_row_offsets.data;
    k.cache_lengths = keys.cache_lengths;
    k.cache_lengths_stride = keys.cache_lengths_stride;
    k.batch = int32_t(batch);
    k.causal = mask == MaskType::kCausal;
    k.row_base = ch.t_begin;
    k.rows = ch.t_end - ch.t_begin;
    k.top_k = int32_t(top_k);
    k.out = output_indices.data;
    k.out_stride0 = output_indices.strides[0];
    k.out_stride1 = output_indices.strides[1];
    k.max_bound = ch.max_bound;
    k.global_slots = output == IndexOutput::kGlobalSlots;
    k.keys = keys;
    QUANTKV_RETURN_IF_ERROR(launch::indexer_topk(k, ctx.cuda_stream));
  }
  return Status::Ok();
}

// The CUDA kernels read and write the fp8 form only (the MXFP4 form is CPU-only for now).
Status check_engine_format(const EngineIndexerKCache& c) {
  if (c.format != IndexKFormat::kFp8) {
    return {StatusCode::kUnimplemented,
            std::string("k_cache.format: the CUDA indexer supports only IndexKFormat::kFp8, got ") +
                index_k_format_name(c.format)};
  }
  return Status::Ok();
}

// The engines' buffer as the kernels need it: 16-byte aligned rows (16-byte loads).
Status check_engine_kernel_limits(const EngineIndexerKCache& c, int64_t dim) {
  QUANTKV_RETURN_IF_ERROR(check_engine_format(c));
  if (dim % 16 != 0 || dim > kMaxDim) {
    return {StatusCode::kUnimplemented,
            "D: the CUDA indexer needs D % 16 == 0 and D <= " + str(kMaxDim) + ", got " + str(dim)};
  }
  if (c.page_bytes() % 16 != 0) {
    return {StatusCode::kUnimplemented,
            "k_cache.page_stride_bytes: the CUDA indexer needs a multiple of 16 "
            "(page_size a multiple of 4 when packed), got " +
                str(c.page_bytes())};
  }
  return detail::check_aligned("k_cache.data", c.data, 16);
}

}  // namespace

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const HostRagged& host,
                                       const Context& ctx, const IndexerOptions& options) {
  // ---- validation: nothing is launched unless every check passes
  // The shared checks (the CPU's messages), then the CUDA backend's own limits.
  QUANTKV_RETURN_IF_ERROR(
      ops::validate_indexer(output_indices, q, q_s, k_collection, layer_idx, mask));
  QUANTKV_RETURN_IF_ERROR(check_indexer_tensor_limits(output_indices, q));
  QUANTKV_RETURN_IF_ERROR(check_indexer_kernel_limits(k_collection, q.shape[2]));
  QUANTKV_RETURN_IF_ERROR(detail::validate_ragged(input_row_offsets, k_collection, host, q.shape[0],
                                                  /*require_pages=*/true, "k_collection"));
  QUANTKV_RETURN_IF_ERROR(validate_index_output(options.output, k_collection.num_blocks,
                                                k_collection.page_size, "k_collection"));
  return launch_indexer(output_indices, q, q_s, input_row_offsets,
                        detail::indexer_key_rows(k_collection, layer_idx),
                        k_collection.batch_size(), mask, host, ctx, options.output);
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const PagedKVCacheCollection& k_collection,
                                       uint32_t layer_idx, MaskType mask, const HostRagged& host,
                                       const Context& ctx) {
  return mla_indexer_ragged_float8_paged(output_indices, q, q_s, input_row_offsets, k_collection,
                                         layer_idx, mask, host, ctx, IndexerOptions{});
}

Status mla_indexer_ragged_float8_paged(TensorView<int32_t, 2> output_indices,
                                       TensorView<const float8_e4m3fn, 3> q,
                                       TensorView<const float, 2> q_s,
                                       TensorView<const uint32_t, 1> input_row_offsets,
                                       const EngineIndexerKCache& k_cache, MaskType mask,
                                       const HostRagged& host, const Context& ctx,
                                       const IndexerOptions& options) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_indexer(output_indices, q, q_s, k_cache, mask));
  QUANTKV_RETURN_IF_ERROR(check_indexer_tensor_limits(output_indices, q));
  QUANTKV_RETURN_IF_ERROR(check_engine_kernel_limits(k_cache, q.shape[2]));
  QUANTKV_RETURN_IF_ERROR(detail::validate_ragged(input_row_offsets, as_collection(k_cache), host,
                                                  q.shape[0],
                                                  /*require_pages=*/true, "k_cache"));
  QUANTKV_RETURN_IF_ERROR(
      validate_index_output(options.output, k_cache.num_blocks, k_cache.page_size, "k_cache"));
  return launch_indexer(output_indices, q, q_s, input_row_offsets,
                        detail::indexer_key_rows(k_cache), k_cache.batch_size(), mask, host, ctx,
                        options.output);
}

namespace {

// The CUDA backend's own limits on k (after the shared checks).
template <typename T>
Status check_k_limits(const TensorView<const T, 2>& k) {
  if (k.shape[1] < 1)
    return invalid_argument("k: expected D >= 1, got shape " + format_shape(k.shape.data(), 2));
  return detail::check_int32("k.shape[0] (T)", k.shape[0]);
}

template <typename T>
Status launch_k_store(TensorView<const T, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
                      const launch::IndexerKeyRows& keys, int64_t batch, ScaleMode scale_mode,
                      const Context& ctx) {
  launch::KStoreArgs a;
  a.k = k.data;
  a.k_bf16 = std::is_same_v<T, bfloat16>;
  a.k_stride0 = k.strides[0];
  a.k_stride1 = k.strides[1];
  a.T = int32_t(k.shape[0]);
  a.D = int32_t(k.shape[1]);
  a.power_of_two = scale_mode == ScaleMode::kPowerOfTwo;
  a.cache = keys;
  a.offs = input_row_offsets.data;
  a.batch = int32_t(batch);
  return launch::indexer_k_store(a, ctx.cuda_stream);
}

template <typename T>
Status k_store(TensorView<const T, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
               const PagedKVCacheCollection& k_collection, uint32_t layer_idx, ScaleMode scale_mode,
               const HostRagged& host, const Context& ctx) {
  // The shared checks (the CPU's messages), then the CUDA backend's own limits.
  QUANTKV_RETURN_IF_ERROR(ops::validate_k_store(k, k_collection, layer_idx, scale_mode));
  QUANTKV_RETURN_IF_ERROR(check_k_limits(k));
  QUANTKV_RETURN_IF_ERROR(detail::validate_ragged(input_row_offsets, k_collection, host, k.shape[0],
                                                  /*require_pages=*/true, "k_collection"));
  return launch_k_store(k, input_row_offsets, detail::indexer_key_rows(k_collection, layer_idx),
                        k_collection.batch_size(), scale_mode, ctx);
}

template <typename T>
Status k_store(TensorView<const T, 2> k, TensorView<const uint32_t, 1> input_row_offsets,
               const EngineIndexerKCache& k_cache, ScaleMode scale_mode, const HostRagged& host,
               const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(ops::validate_k_store(k, k_cache, scale_mode));
  QUANTKV_RETURN_IF_ERROR(check_engine_format(k_cache));
  QUANTKV_RETURN_IF_ERROR(check_k_limits(k));
  QUANTKV_RETURN_IF_ERROR(detail::validate_ragged(input_row_offsets, as_collection(k_cache), host,
                                                  k.shape[0],
                                                  /*require_pages=*/true, "k_cache"));
  return launch_k_store(k, input_row_offsets, detail::indexer_key_rows(k_cache),
                        k_cache.batch_size(), scale_mode, ctx);
}

}  // namespace

Status indexer_k_store(TensorView<const float, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const HostRagged& host, const Context& ctx) {
  return k_store(k, input_row_offsets, k_collection, layer_idx, scale_mode, host, ctx);
}
Status indexer_k_store(TensorView<const bfloat16, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const PagedKVCacheCollection& k_collection, uint32_t layer_idx,
                       ScaleMode scale_mode, const HostRagged& host, const Context& ctx) {
  return k_store(k, input_row_offsets, k_collection, layer_idx, scale_mode, host, ctx);
}
Status indexer_k_store(TensorView<const float, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const HostRagged& host, const Context& ctx) {
  return k_store(k, input_row_offsets, k_cache, scale_mode, host, ctx);
}
Status indexer_k_store(TensorView<const bfloat16, 2> k,
                       TensorView<const uint32_t, 1> input_row_offsets,
                       const EngineIndexerKCache& k_cache, ScaleMode scale_mode,
                       const HostRagged& host, const Context& ctx) {
  return k_store(k, input_row_offsets, k_cache, scale_mode, host, ctx);
}

}  // namespace quantkv::cuda
#endif  // QUANTKV_WITH_CUDA
