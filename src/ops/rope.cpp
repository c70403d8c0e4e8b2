// RoPE over the paged cache (MAX's fused_qk_rope_ragged) and the validation of RopeOptions
// shared with the indexer front end. Rows are rotated by the shared kernels of
// src/cpu/rotation_kernels.hpp; nothing is written unless every check passes.
#include "quantkv/rope.hpp"

#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cache_snapshot.hpp"
#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "core/view_checks.hpp"
#include "cpu/kernels.hpp"
#include "ops/ragged_tokens.hpp"
#include "ops/rope_options.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

const char* rope_layout_name(RopeLayout layout) {
  return layout == RopeLayout::kInterleaved ? "interleaved"
         : layout == RopeLayout::kHalfSplit ? "half_split"
                                            : "?";
}
const char* rope_placement_name(RopePlacement placement) {
  return placement == RopePlacement::kTrailing  ? "trailing"
         : placement == RopePlacement::kLeading ? "leading"
                                                : "?";
}

namespace detail {

Status validate_rope_options(const RopeOptions& o, int64_t T, int64_t row_len,
                             bool positions_required, const char* name) {
  const std::string n(name);
  QUANTKV_RETURN_IF_ERROR(check_shape((n + ".freqs_cis").c_str(), "[max_seq_len, rope_dim]",
                                      o.freqs_cis, {kAnyExtent, kAnyExtent}));
  const int64_t rope_dim = o.freqs_cis.shape[1];
  if (rope_dim < 2 || rope_dim % 2 != 0 || rope_dim > row_len) {
    return invalid_argument(n + ".freqs_cis: expected rope_dim = shape[1] even and in [2, " +
                            str(row_len) + "] (the row length), got " + str(rope_dim));
  }
  if (o.freqs_cis.shape[0] > 0 && o.freqs_cis.strides[1] != 1) {
    return invalid_argument(n +
                            ".freqs_cis: expected rows with stride 1 along rope_dim, got stride " +
                            str(o.freqs_cis.strides[1]));
  }
  if (o.layout != RopeLayout::kInterleaved && o.layout != RopeLayout::kHalfSplit) {
    return invalid_argument(n + ".layout: expected kInterleaved or kHalfSplit, got " +
                            str(int(o.layout)));
  }
  if (o.placement != RopePlacement::kTrailing && o.placement != RopePlacement::kLeading) {
    return invalid_argument(n + ".placement: expected kTrailing or kLeading, got " +
                            str(int(o.placement)));
  }
  const TensorView<const uint32_t, 1>& ids = o.position_ids;
  if (ids.shape[0] == 0 && !positions_required) return Status::Ok();
  QUANTKV_RETURN_IF_ERROR(check_shape((n + ".position_ids").c_str(), "[T]", ids, {T}));
  const int64_t max_seq_len = o.freqs_cis.shape[0];
  for (int64_t t = 0; t < T; ++t) {
    if (int64_t(ids(t)) >= max_seq_len) {
      return out_of_range(n + ".position_ids: position_ids[" + str(t) + "] = " + str(ids(t)) +
                          " has no row in freqs_cis (max_seq_len = " + str(max_seq_len) + ")");
    }
  }
  return Status::Ok();
}

Status validate_rope_cache_positions(const RopeOptions& o, const PagedKVCacheCollection& c,
                                     const TensorView<const uint32_t, 1>& offs, const char* name) {
  if (o.position_ids.shape[0] > 0) return Status::Ok();
  const int64_t max_seq_len = o.freqs_cis.shape[0];
  for (int64_t b = 0; b < c.batch_size(); ++b) {
    const int64_t seq_len = int64_t(offs(b + 1)) - int64_t(offs(b));
    const int64_t last = int64_t(c.cache_lengths(b)) + seq_len - 1;
    if (seq_len > 0 && last >= max_seq_len) {
      return out_of_range(std::string(name) + ".freqs_cis: sequence " + str(b) +
                          " reaches position " + str(last) + " (cache_length " +
                          str(c.cache_lengths(b)) + " + " + str(seq_len) +
                          " new - 1), the table has max_seq_len = " + str(max_seq_len));
    }
  }
  return Status::Ok();
}

}  // namespace detail

namespace {

// Reads elements [d0, d0 + n) of one cache row (element offset `row`) as floats: e4m3 codes
// times their scale when the cache carries scales (`scales`: the row's scales, else null).
void load_cache_row(const PagedKVCacheCollection& c, int64_t row, int64_t d0, int64_t n,
                    const float* scales, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = load_as_float(c.blocks, c.dtype, row + d0 + j);
  if (scales != nullptr) {
    for (int64_t j = 0; j < n; ++j) out[j] *= scales[(d0 + j) / c.scale_granularity];
  }
}
// Writes them back, rounded once to the cache dtype (divided by the same scale first).
void store_cache_row(const PagedKVCacheCollection& c, int64_t row, int64_t d0, int64_t n,
                     const float* scales, const float* in) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = scales != nullptr ? in[j] / scales[(d0 + j) / c.scale_granularity] : in[j];
    store_from_float(c.blocks, c.dtype, row + d0 + j, v);
  }
}

float to_float(float x) { return x; }
float to_float(bfloat16 x) { return bf16_to_float(x.bits); }
template <typename Elem>
Elem from_float(float x) {
  if constexpr (std::is_same_v<Elem, bfloat16>) {
    return bfloat16{float_to_bf16(x)};
  } else {
    return x;
  }
}

Status validate_rope_call(const int64_t* q_shape, const void* q_data, const int64_t* q_strides,
                          const int64_t* out_shape, const void* out_data,
                          const int64_t* out_strides, const TensorView<const uint32_t, 1>& offs,
                          const PagedKVCacheCollection& c, const RopeOptions& o, uint32_t layer_idx,
                          std::size_t elem_bytes, CacheSnapshot* snap) {
  const int64_t any3[3] = {kAnyExtent, kAnyExtent, kAnyExtent};
  QUANTKV_RETURN_IF_ERROR(detail::check_view("q_proj", "[T, Hq, D]", q_data, q_shape, q_strides, 3,
                                             any3, false, elem_bytes));
  QUANTKV_RETURN_IF_ERROR(detail::check_view("output", "[T, Hq, D]", out_data, out_shape,
                                             out_strides, 3, q_shape, false, elem_bytes));
  QUANTKV_RETURN_IF_ERROR(validate_paged_kv(c, "kv_collection"));
  const int64_t T = q_shape[0], D = q_shape[2];
  if (D != c.head_size) {
    return invalid_argument("q_proj: expected D = q_proj.shape[2] == kv_collection.head_size = " +
                            str(c.head_size) + ", got " + str(D));
  }
  if (int64_t(layer_idx) >= c.num_layers) {
    return out_of_range("layer_idx: expected < kv_collection.num_layers = " + str(c.num_layers) +
                        ", got " + str(layer_idx));
  }
  QUANTKV_RETURN_IF_ERROR(
      detail::validate_rope_options(o, T, D, /*positions_required=*/false, "options"));
  // One snapshot of the ragged metadata, validated, then the only copy read.
  QUANTKV_RETURN_IF_ERROR(snapshot_ragged_cache(c, offs, T, /*require_pages=*/true,
                                                "input_row_offsets", "kv_collection", snap));
  return detail::validate_rope_cache_positions(o, snap->cache, snap->offsets, "options");
}

template <typename Elem>
void rotate(TensorView<const Elem, 3> q, TensorView<const uint32_t, 1> offs,
            const PagedKVCacheCollection& c, const RopeOptions& o, uint32_t layer,
            TensorView<Elem, 3> out, const Context& ctx);

template <typename Elem>
Status rope_ragged(TensorView<const Elem, 3> q, TensorView<const uint32_t, 1> offs,
                   const PagedKVCacheCollection& c, const RopeOptions& o, uint32_t layer,
                   TensorView<Elem, 3> out, const Context& ctx) {
  return run_entry_point("fused_qk_rope_ragged", ctx, [&]() -> Status {
    CacheSnapshot snap;
    QUANTKV_RETURN_IF_ERROR(validate_rope_call(q.shape.data(), q.data, q.strides.data(),
                                               out.shape.data(), out.data, out.strides.data(), offs,
                                               c, o, layer, sizeof(Elem), &snap));
    // Each output element is written once (its own read of q comes first, so out == q is
    // safe); the output must not reach into the cache, which is rotated in place.
    QUANTKV_RETURN_IF_ERROR(check_distinct_elements("output", out));
    QUANTKV_RETURN_IF_ERROR(
        check_no_overlap(memory_range("output", out),
                         {memory_range("kv_collection.blocks", c.blocks,
                                       c.total_elements() * int64_t(dtype_size(c.dtype)))}));
    rotate(q, snap.offsets, snap.cache, o, layer, out, ctx);
    return Status::Ok();
  });
}

// Validated before; `offs` and the metadata of `c` are the snapshot's.
template <typename Elem>
void rotate(TensorView<const Elem, 3> q, TensorView<const uint32_t, 1> offs,
            const PagedKVCacheCollection& c, const RopeOptions& o, uint32_t layer,
            TensorView<Elem, 3> out, const Context& ctx) {
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t rope_dim = detail::rope_dim_of(o), off = detail::rope_offset(o, D);
  const cpu::RopeRowFn rope = cpu::kernels().rotation.rope;
  // Streaming: q read and written, the rope part of K read and written.
  const double bytes = double(T) * (2.0 * Hq * D * sizeof(Elem) +
                                    2.0 * c.num_heads * rope_dim * dtype_size(c.dtype));
  const int threads = threads_for_work(ctx, bytes, kMinBytesPerThread);
  detail::for_each_new_token(
      c, offs, threads, D, [&](int64_t t, int64_t b, int64_t pos, float* row) {
        const float* cs = detail::rope_table_row(o, t, pos);
        for (int64_t h = 0; h < Hq; ++h) {
          for (int64_t d = 0; d < rope_dim; ++d) row[d] = to_float(q(t, h, off + d));
          rope(row, cs, rope_dim, o.layout);
          // The other elements are copied bit for bit (NaN payloads included).
          for (int64_t d = 0; d < D; ++d) {
            out(t, h, d) =
                d >= off && d < off + rope_dim ? from_float<Elem>(row[d - off]) : q(t, h, d);
          }
        }
        const int64_t page = c.page_of(b, pos), slot = pos % c.page_size;
        for (int64_t h = 0; h < c.num_heads; ++h) {
          const int64_t k_row = c.element_offset(page, 0, layer, slot, h, 0);
          const float* scales =
              c.scales != nullptr ? c.scales + c.scale_offset(page, 0, layer, slot, h, 0) : nullptr;
          load_cache_row(c, k_row, off, rope_dim, scales, row);
          rope(row, cs, rope_dim, o.layout);
          store_cache_row(c, k_row, off, rope_dim, scales, row);
        }
      });
}

}  // namespace

Status fused_qk_rope_ragged(const FusedQkRopeArgs& a, const Context& ctx) {
  const bool f32 = given(a.q_proj), bf16 = given(a.q_proj_bf16);
  const bool out32 = given(a.output), out16 = given(a.output_bf16);
  auto refuse = [&](std::string message) {
    return run_entry_point("fused_qk_rope_ragged", ctx,
                           [&] { return invalid_argument(std::move(message)); });
  };
  if (f32 == bf16) {
    return refuse(
        std::string(
            "q_proj, q_proj_bf16: expected exactly one of the fp32 and the bf16 rows, got ") +
        (f32 ? "both" : "neither"));
  }
  if (out32 != f32 || out16 != bf16) {
    return refuse(
        f32 ? "output: expected the fp32 output (and no output_bf16) for fp32 q_proj"
            : "output_bf16: expected the bf16 output (and no output) for bf16 q_proj_bf16");
  }
  if (a.kv_collection == nullptr) return refuse("kv_collection: pointer is null");
  return f32 ? rope_ragged(a.q_proj, a.input_row_offsets, *a.kv_collection, a.options, a.layer_idx,
                           a.output, ctx)
             : rope_ragged(a.q_proj_bf16, a.input_row_offsets, *a.kv_collection, a.options,
                           a.layer_idx, a.output_bf16, ctx);
}

Status fused_qk_rope_ragged(TensorView<const bfloat16, 3> q_proj,
                            TensorView<const uint32_t, 1> input_row_offsets,
                            const PagedKVCacheCollection& kv_collection, const RopeOptions& options,
                            uint32_t layer_idx, TensorView<bfloat16, 3> output,
                            const Context& ctx) {
  return fused_qk_rope_ragged(
      FusedQkRopeArgs{
          {}, q_proj, input_row_offsets, &kv_collection, layer_idx, options, {}, output},
      ctx);
}

Status fused_qk_rope_ragged(TensorView<const float, 3> q_proj,
                            TensorView<const uint32_t, 1> input_row_offsets,
                            const PagedKVCacheCollection& kv_collection, const RopeOptions& options,
                            uint32_t layer_idx, TensorView<float, 3> output, const Context& ctx) {
  return fused_qk_rope_ragged(
      FusedQkRopeArgs{
          q_proj, {}, input_row_offsets, &kv_collection, layer_idx, options, output, {}},
      ctx);
}

Status make_freqs_cis(TensorView<float, 2> freqs_cis, double theta) {
  QUANTKV_RETURN_IF_ERROR(
      check_shape("freqs_cis", "[max_seq_len, rope_dim]", freqs_cis, {kAnyExtent, kAnyExtent}));
  const int64_t rope_dim = freqs_cis.shape[1];
  if (rope_dim < 2 || rope_dim % 2 != 0) {
    return invalid_argument("freqs_cis: expected rope_dim = shape[1] even and >= 2, got " +
                            str(rope_dim));
  }
  if (!(theta > 1.0) || !std::isfinite(theta)) {
    return invalid_argument("theta: expected a finite value > 1, got " + std::to_string(theta));
  }
  for (int64_t p = 0; p < freqs_cis.shape[0]; ++p) {
    for (int64_t i = 0; i < rope_dim / 2; ++i) {
      const double angle = double(p) * std::pow(theta, -2.0 * double(i) / double(rope_dim));
      freqs_cis(p, 2 * i) = float(std::cos(angle));
      freqs_cis(p, 2 * i + 1) = float(std::sin(angle));
    }
  }
  return Status::Ok();
}

}  // namespace quantkv
