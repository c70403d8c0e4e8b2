// The CPU loops of the fused experts (see moe_driver.hpp). Compiled with -ffp-contract=off
// (CMakeLists.txt): the activation and the combine round every product and sum on its own.
#include "cpu/moe_driver.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "cpu/gemm_driver.hpp"
#include "cpu/kernels.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::cpu {
namespace {

// The routes of one call, bucketed by expert (stable: expert, then token, then slot).
struct Routes {
  std::vector<int64_t> start;  // [E + 1]: expert e's routes are [start[e], start[e + 1])
  std::vector<int64_t> token;  // [routes]: the route's token
  std::vector<int64_t> of;     // [T * k]: the route of (t, j), or -1 when it is skipped
};

void bucket_routes(const FusedExpertsArgs& a, int64_t num_experts, Routes* r) {
  const int64_t t_count = a.topk_ids.shape[0], k = a.topk_ids.shape[1];
  r->start.assign(std::size_t(num_experts + 1), 0);
  r->of.assign(std::size_t(t_count * k), -1);
  auto expert_of = [&](int64_t t, int64_t j) {
    const int64_t e = int64_t(a.topk_ids(t, j)) - a.expert_offset;
    return e >= 0 && e < num_experts ? e : int64_t(-1);
  };
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = expert_of(t, j);
      if (e >= 0) ++r->start[std::size_t(e + 1)];
    }
  }
  for (int64_t e = 0; e < num_experts; ++e) r->start[e + 1] += r->start[e];
  r->token.assign(std::size_t(r->start[num_experts]), 0);
  std::vector<int64_t> cursor(r->start.begin(), r->start.end() - 1);
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = expert_of(t, j);
      if (e < 0) continue;
      const int64_t pos = cursor[e]++;
      r->token[pos] = t;
      r->of[t * k + j] = pos;
    }
  }
}

// n values of T, not initialised (make_unique_for_overwrite).
template <typename T>
std::unique_ptr<T[]> uninitialised(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(std::size_t(n));
}

// Quantised activations of `rows` rows of K values: codes and 5-D swizzled scales, sized for the
// largest expert once.
struct QuantBuffers {
  std::vector<uint8_t> data, scales;
  void reserve(BlockFormat f, int64_t rows, int64_t k) {
    data.resize(std::size_t(rows * row_bytes(f, k)));
    const auto s = swizzled_scale_shape(rows, k / sf_vector_size(f));
    scales.resize(std::size_t(s[0] * s[1] * s[2] * s[3] * s[4]));
  }
  TensorView<uint8_t, 2> data_view(BlockFormat f, int64_t rows, int64_t k) {
    return make_view(data.data(), rows, row_bytes(f, k));
  }
  TensorView<uint8_t, 5> scale_view(BlockFormat f, int64_t rows, int64_t k) {
    return make_view(scales.data(), swizzled_scale_shape(rows, k / sf_vector_size(f)));
  }
};

template <typename T>
Status quantise_rows(TensorView<const T, 2> x, float global, BlockFormat f, QuantBuffers* q,
                     const Context& ctx, GemmActivations* acts) {
  const int64_t rows = x.shape[0], k = x.shape[1];
  const TensorView<uint8_t, 2> data = q->data_view(f, rows, k);
  const TensorView<uint8_t, 5> scales = q->scale_view(f, rows, k);
  QUANTKV_RETURN_IF_ERROR(quantize_dynamic_block_scaled(x, global, f, data, scales, ctx));
  prepare_block_activations(TensorView<const uint8_t, 2>(data),
                            TensorView<const uint8_t, 5>(scales), f, k, ctx, acts);
  return Status::Ok();
}

}  // namespace

// The routed experts are run in batches of consecutive experts holding up to kBatchRows routes
// (at least one expert): each batch's w13 GEMMs in one parallel region over all their 32-column
// pairs, then the activation of all its rows, then its w2 GEMMs in one region. Decode (a few
// routes on many experts) is one batch: two parallel regions per call instead of two per
// expert, and every routed expert's pairs shared among the threads. The scratch is sized by
// the largest batch.
constexpr int64_t kBatchRows = 256;

namespace {

Status run_chunk(const FusedExpertsArgs& a, const Context& ctx) {
  const PreparedExperts& ex = *a.experts;
  const int64_t num_experts = ex.num_experts(), hidden = ex.hidden(), inter = ex.intermediate();
  const int64_t t_count = a.topk_ids.shape[0], k = a.topk_ids.shape[1];
  const BlockFormat f = ex.w13[0].format;
  const bool quantised = a.quantize_activations;

  // Everything is allocated before y is written (a failure leaves y untouched).
  Routes routes;
  bucket_routes(a, num_experts, &routes);
  const int64_t route_count = routes.start[num_experts];
  // The batches: [batch_start[b], batch_start[b + 1]) experts.
  std::vector<int64_t> batch_start = {0};
  int64_t max_rows = 0, max_batch_rows = 0, max_batch_experts = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t b0 = batch_start.back();
    max_rows = std::max(max_rows, routes.start[e + 1] - routes.start[e]);
    if (e + 1 == num_experts || routes.start[e + 2] - routes.start[b0] > kBatchRows) {
      batch_start.push_back(e + 1);
      max_batch_rows = std::max(max_batch_rows, routes.start[e + 1] - routes.start[b0]);
      max_batch_experts = std::max(max_batch_experts, e + 1 - b0);
    }
  }
  // Scratch that every step writes in full before reading it, so left uninitialised (zeroing
  // the [routes, H] rows alone took 9-16 ms of a 140-180 ms prefill call, page faults included).
  const auto out_buf = uninitialised<float>(route_count * hidden);       // [routes, H]: w2's rows
  const auto gu_buf = uninitialised<float>(max_batch_rows * 2 * inter);  // [rows, 2I]: w13's
  const auto xg_buf = uninitialised<uint16_t>(max_batch_rows * hidden);  // gathered bf16 x
  const auto h16_buf = uninitialised<uint16_t>(quantised ? 0 : max_batch_rows * inter);
  const auto h32_buf = uninitialised<float>(quantised ? max_batch_rows * inter : 0);
  float* const out = out_buf.get();
  float* const gu = gu_buf.get();
  uint16_t* const xg = xg_buf.get();
  uint16_t* const h16 = h16_buf.get();
  float* const h32 = h32_buf.get();
  // The quantiser's scratch, one per thread that prepares experts' activations (below).
  const int max_threads = resolved_num_threads(ctx);
  std::vector<QuantBuffers> qx(quantised ? std::size_t(max_threads) : 0);
  std::vector<QuantBuffers> qh(quantised ? std::size_t(max_threads) : 0);
  for (QuantBuffers& q : qx) q.reserve(f, max_rows, hidden);
  for (QuantBuffers& q : qh) q.reserve(f, max_rows, inter);
  std::vector<GemmActivations> acts(static_cast<std::size_t>(max_batch_experts));
  std::vector<RowEpilogue> epis(static_cast<std::size_t>(max_batch_experts));
  // Per expert of a batch, w13's column factors when up's differs from gate's (w3_alpha).
  std::vector<std::vector<float>> col13(ex.w3_alpha.empty() ? 0 : std::size_t(max_batch_experts));
  std::vector<GemmJob> jobs;
  jobs.reserve(std::size_t(max_batch_experts));
  const int sfv = sf_vector_size(f);
  const bool interleaved = a.gate_up == GateUpLayout::kInterleaved;
  std::vector<Status> prep_status(static_cast<std::size_t>(max_batch_experts));
  Context one_thread = ctx;
  one_thread.num_threads = 1;
  // The activations of the batch's experts [e0, e1) (rows b0 + ...) into acts: rows_of(r0, n) the
  // expert's n rows (bf16, or fp32 h), quantised per row with global[e] (quantised mode) or
  // taken as bf16. The experts are shared among the threads (one expert whole per thread, its
  // own quantiser scratch `q[thread]`, the calls inside single-threaded): the same bits as one
  // at a time. A prefill batch's 8-128 experts took 6-16 ms one after the other.
  auto prepare_experts_rows = [&](int64_t e0, int64_t e1, int64_t b0, int64_t k_dim,
                                  const std::vector<float>& global, std::vector<QuantBuffers>& q,
                                  auto rows_of) -> Status {
    // Each routed expert's preparation zero-fills at least one activation tile (kRowTile rows)
    // and the quantiser's 128-row padded scales whatever its row count, so its rows count as at
    // least kRowTile. So a decode step's one-row experts (5-12 us each at T = 1 on a Zen 3) are
    // shared among the threads too; the preparations of a layer with a small hidden size
    // still run on one thread.
    double bytes = 0.0;
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t n = routes.start[e + 1] - routes.start[e];
      if (n > 0) bytes += double(std::max<int64_t>(n, kRowTile)) * double(k_dim) * 8.0;
    }
    const int threads = threads_for_work(ctx, bytes, kMinBytesPerThread);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t r0 = routes.start[e] - b0, n = routes.start[e + 1] - routes.start[e];
      Status& st = prep_status[std::size_t(e - e0)];
      st = Status::Ok();
      if (n == 0) continue;
      try {
        const auto x = rows_of(r0, n);
        GemmActivations* act = &acts[std::size_t(e - e0)];
        using T = std::remove_const_t<typename decltype(x)::element_type>;
        if (quantised) {
          st = quantise_rows(x, global[e], f, &q[std::size_t(omp_get_thread_num())], one_thread,
                             act);
        } else if constexpr (std::is_same_v<T, bfloat16>) {
          prepare_bf16_activations(x, sfv, one_thread, act);
        }
      } catch (const std::bad_alloc&) {
        st = resource_exhausted("workspace: cannot allocate the activations of expert " +
                                std::to_string(e));
      }
    }
    for (int64_t e = e0; e < e1; ++e) QUANTKV_RETURN_IF_ERROR(prep_status[std::size_t(e - e0)]);
    return Status::Ok();
  };

  for (std::size_t b = 0; b + 1 < batch_start.size(); ++b) {
    const int64_t e0 = batch_start[b], e1 = batch_start[b + 1];
    const int64_t b0 = routes.start[e0], rows = routes.start[e1] - b0;
    if (rows == 0) continue;
    // Gather the batch's routed rows of x (streaming: 4 bytes per value read and written).
    const int gather_threads =
        threads_for_work(ctx, double(rows) * double(hidden) * 4.0, kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(gather_threads) if (gather_threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const bfloat16* src = a.x.data + routes.token[b0 + r] * a.x.strides[0];
      std::memcpy(xg + r * hidden, src, std::size_t(hidden) * sizeof(uint16_t));
    }
    // w13 of every expert of the batch.
    QUANTKV_RETURN_IF_ERROR(
        prepare_experts_rows(e0, e1, b0, hidden, ex.x_global, qx, [&](int64_t r0, int64_t n) {
          return make_view(reinterpret_cast<const bfloat16*>(xg) + r0 * hidden, n, hidden);
        }));
    jobs.clear();
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t r0 = routes.start[e] - b0, n = routes.start[e + 1] - routes.start[e];
      if (n == 0) continue;
      GemmActivations& act = acts[std::size_t(e - e0)];
      float f13 = ex.w13_alpha[e];
      float f3 = ex.w3_alpha.empty() ? ex.w13_alpha[e] : ex.w3_alpha[e];
      if (quantised) {
        f13 = ex.w13_alpha[e] / ex.x_global[e];
        f3 = f3 / ex.x_global[e];
      }
      RowEpilogue& e13 = epis[std::size_t(e - e0)];
      e13 = RowEpilogue{};
      e13.alpha = f13;
      if (f3 != f13) {  // gate's columns fl(c * f13), up's fl(c * f3)
        std::vector<float>& cols = col13[std::size_t(e - e0)];
        cols.resize(std::size_t(2 * inter));
        for (int64_t i = 0; i < inter; ++i) {
          cols[std::size_t(interleaved ? 2 * i : i)] = f13;
          cols[std::size_t(interleaved ? 2 * i + 1 : inter + i)] = f3;
        }
        e13.column_alpha = cols.data();
      }
      e13.bias_f32 =
          a.w13_bias.data != nullptr ? a.w13_bias.data + e * a.w13_bias.strides[0] : nullptr;
      e13.out_f32 = gu + r0 * 2 * inter;
      e13.out_stride = 2 * inter;
      jobs.push_back({n, &act, &ex.w13[e], e13.plug()});
    }
    QUANTKV_RETURN_IF_ERROR(run_gemm_batch(jobs, ctx));

    // The activation: h = act(gate, up) per the layout, in spans of kActSpan values of a row
    // (rows x spans shared among the threads, so that a decode step's few rows still split),
    // by the level's span kernel (every lane the scalar function's steps: the same bits on
    // every ISA and whichever thread runs it). About 1 ns a value vectorised, 10-20 scalar
    // (exp_f32, a division, the clamps); counted as 32 bytes a value for the thread count.
    constexpr int64_t kActSpan = 256;
    const int64_t spans = (inter + kActSpan - 1) / kActSpan;
    const MoeActivationSpanFn act_span = kernels().math.moe_activation;
    const int act_threads =
        threads_for_work(ctx, double(rows) * double(inter) * 32.0, kMinBytesPerThread);
#pragma omp parallel for collapse(2) schedule(static) num_threads(act_threads) if (act_threads > 1)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t sp = 0; sp < spans; ++sp) {
        const float* g = gu + r * 2 * inter;
        const int64_t i0 = sp * kActSpan, n = std::min(inter, i0 + kActSpan) - i0;
        alignas(64) float gate[kActSpan], up[kActSpan], h[kActSpan];
        const float* gate_p = g + i0;
        const float* up_p = g + inter + i0;
        if (interleaved) {
          for (int64_t i = 0; i < n; ++i) {
            gate[i] = g[2 * (i0 + i)];
            up[i] = g[2 * (i0 + i) + 1];
          }
          gate_p = gate;
          up_p = up;
        }
        float* h_p = quantised ? h32 + r * inter + i0 : h;
        act_span(a.activation, gate_p, up_p, n, a.swiglu_alpha, a.swiglu_limit, h_p);
        if (!quantised) {
          for (int64_t i = 0; i < n; ++i) h16[r * inter + i0 + i] = float_to_bf16(h[i]);
        }
      }
    }

    // w2 of every expert of the batch.
    if (quantised) {
      QUANTKV_RETURN_IF_ERROR(
          prepare_experts_rows(e0, e1, b0, inter, ex.h_global, qh, [&](int64_t r0, int64_t n) {
            return make_view<const float>(h32 + r0 * inter, n, inter);
          }));
    } else {
      QUANTKV_RETURN_IF_ERROR(
          prepare_experts_rows(e0, e1, b0, inter, ex.h_global, qh, [&](int64_t r0, int64_t n) {
            return make_view(reinterpret_cast<const bfloat16*>(h16) + r0 * inter, n, inter);
          }));
    }
    jobs.clear();
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t r0 = routes.start[e] - b0, n = routes.start[e + 1] - routes.start[e];
      if (n == 0) continue;
      GemmActivations& act = acts[std::size_t(e - e0)];
      float f2 = ex.w2_alpha[e];
      if (quantised) f2 = ex.w2_alpha[e] / ex.h_global[e];
      RowEpilogue& e2 = epis[std::size_t(e - e0)];
      e2 = RowEpilogue{};
      e2.alpha = f2;
      e2.bias_f32 = a.w2_bias.data != nullptr ? a.w2_bias.data + e * a.w2_bias.strides[0] : nullptr;
      e2.out_f32 = out + (b0 + r0) * hidden;
      e2.out_stride = hidden;
      jobs.push_back({n, &act, &ex.w2[e], e2.plug()});
    }
    QUANTKV_RETURN_IF_ERROR(run_gemm_batch(jobs, ctx));
  }

  // The combine, per token in slot order: acc = acc + w * o, each step rounded in fp32, in spans
  // of kCombineSpan columns (slot by slot over the span: the same steps per column as one column
  // at a time, in a loop the compiler vectorises).
  constexpr int64_t kCombineSpan = 256;
  const int threads =
      threads_for_work(ctx, double(t_count) * double(hidden) * 8.0, kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t c0 = 0; c0 < hidden; c0 += kCombineSpan) {
      const int64_t n = std::min(kCombineSpan, hidden - c0);
      alignas(64) float acc[kCombineSpan];
      std::fill_n(acc, n, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t pos = routes.of[t * k + j];
        if (pos < 0) continue;
        const float w = a.topk_weights(t, j);
        const float* o = out + pos * hidden + c0;
        for (int64_t c = 0; c < n; ++c) acc[c] = acc[c] + w * o[c];
      }
      if (a.y_f32.data != nullptr) {
        std::copy_n(acc, n, a.y_f32.data + t * a.y_f32.strides[0] + c0);
      } else {
        uint16_t* y = reinterpret_cast<uint16_t*>(a.y.data) + t * a.y.strides[0] + c0;
        for (int64_t c = 0; c < n; ++c) y[c] = float_to_bf16(acc[c]);
      }
    }
  }
  return Status::Ok();
}

// Rows [t0, t0 + n) of a [T, ...] view.
template <typename T>
TensorView<T, 2> token_rows(TensorView<T, 2> v, int64_t t0, int64_t n) {
  v.data += t0 * v.strides[0];
  v.shape[0] = n;
  return v;
}

}  // namespace

// A call whose routes' w2 rows (T * k * H fp32) exceed ctx.experts_budget_bytes runs in chunks
// of consecutive tokens, each combined into an fp32 staging of y: a token's output depends only
// on its own routes (the GEMM rows are independent, the combine is per token), so the bits are
// those of one pass, and y is written only after every chunk has succeeded.
Status run_fused_experts(const FusedExpertsArgs& a, const Context& ctx) {
  const int64_t t_count = a.topk_ids.shape[0], k = a.topk_ids.shape[1];
  const int64_t hidden = a.experts->hidden();
  const double token_bytes = double(std::max<int64_t>(k, 1)) * double(hidden) * sizeof(float);
  const int64_t chunk =
      std::max<int64_t>(1, int64_t(std::min(double(ctx.experts_budget_bytes) / token_bytes,
                                            double(std::max<int64_t>(t_count, 1)))));
  if (chunk >= t_count) return run_chunk(a, ctx);

  std::vector<float> staged(std::size_t(t_count * hidden));  // [T, H]
  FusedExpertsArgs part = a;
  part.y = {};
  for (int64_t t0 = 0; t0 < t_count; t0 += chunk) {
    const int64_t n = std::min(chunk, t_count - t0);
    part.x = token_rows(a.x, t0, n);
    part.topk_ids = token_rows(a.topk_ids, t0, n);
    part.topk_weights = token_rows(a.topk_weights, t0, n);
    part.y_f32 = make_view(staged.data() + t0 * hidden, n, hidden);
    QUANTKV_RETURN_IF_ERROR(run_chunk(part, ctx));
  }
  const int threads =
      threads_for_work(ctx, double(t_count) * double(hidden) * 6.0, kMinBytesPerThread);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < t_count; ++t) {
    const float* src = staged.data() + t * hidden;
    if (a.y_f32.data != nullptr) {
      std::memcpy(a.y_f32.data + t * a.y_f32.strides[0], src, std::size_t(hidden) * sizeof(float));
    } else {
      uint16_t* dst = reinterpret_cast<uint16_t*>(a.y.data) + t * a.y.strides[0];
      for (int64_t c = 0; c < hidden; ++c) dst[c] = float_to_bf16(src[c]);
    }
  }
  return Status::Ok();
}

}  // namespace quantkv::cpu
