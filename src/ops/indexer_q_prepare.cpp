// Indexer Q prepare (contract §5): q [T, H, D] and head weights [T, H] -> e4m3 q with one scale s
// per (token, head), and q_s = w * H^-0.5 * s * D^-0.5 (DeepSeek-V3.2's order of operations:
// weights * n_heads^-0.5, then * q_scale * softmax_scale), every product rounded to fp32.
// With an IndexerFrontEnd each head's row is first rotated (src/cpu/indexer_front_end.hpp).
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "core/out_of_memory.hpp"
#include "core/threads.hpp"
#include "core/view_checks.hpp"
#include "cpu/indexer_front_end.hpp"
#include "cpu/indexer_quantize.hpp"
#include "cpu/kernels.hpp"
#include "ops/rope_options.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {
namespace {

template <typename Elem>
Status validate_prepare(const TensorView<const Elem, 3>& q,
                        const TensorView<const float, 2>& weights,
                        const TensorView<float8_e4m3fn, 3>& q_fp8, const TensorView<float, 2>& q_s,
                        ScaleMode scale_mode, const IndexerFrontEnd* fe) {
  QUANTKV_RETURN_IF_ERROR(check_shape("q", "[T, H, D]", q, {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  if (H < 1 || D < 1) {
    return invalid_argument("q: expected H >= 1 and D >= 1, got shape " +
                            format_shape(q.shape.data(), 3));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("weights", "[T, H]", weights, {T, H}));
  QUANTKV_RETURN_IF_ERROR(check_shape("q_fp8", "[T, H, D]", q_fp8, {T, H, D}));
  QUANTKV_RETURN_IF_ERROR(check_shape("q_s", "[T, H]", q_s, {T, H}));
  if (T > 0 && q_fp8.strides[2] != 1) {
    return invalid_argument(
        "q_fp8: expected the D dimension to be contiguous (stride 1), got stride " +
        std::to_string(q_fp8.strides[2]));
  }
  if (scale_mode != ScaleMode::kFloat && scale_mode != ScaleMode::kPowerOfTwo) {
    return invalid_argument("scale_mode: expected kFloat or kPowerOfTwo, got " +
                            std::to_string(int(scale_mode)));
  }
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("q_fp8", q_fp8));
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("q_s", q_s));
  const MemoryRange q_range = memory_range("q", q), w_range = memory_range("weights", weights);
  QUANTKV_RETURN_IF_ERROR(
      check_no_overlap(memory_range("q_fp8", q_fp8), {q_range, w_range, memory_range("q_s", q_s)}));
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("q_s", q_s), {q_range, w_range}));
  if (fe != nullptr) return detail::validate_front_end(*fe, T, D, /*positions_required=*/true);
  return Status::Ok();
}

int thread_index() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

float to_float(float x) { return x; }
float to_float(bfloat16 x) { return bf16_to_float(x.bits); }

// Validated before; allocates before its parallel region only.
template <typename Elem>
Status run_prepare(TensorView<const Elem, 3> q, TensorView<const float, 2> weights,
                   TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s,
                   ScaleMode scale_mode, const IndexerFrontEnd* fe, const Context& ctx) {
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  const float head_factor = float(1.0 / std::sqrt(double(H)));
  const float dim_factor = float(1.0 / std::sqrt(double(D)));
  // Rows go straight to the quantiser when they are contiguous f32 and need no rotation.
  const cpu::TokenQuantizeF32 direct =
      fe == nullptr && std::is_same_v<Elem, float> && (D == 1 || q.strides[2] == 1)
          ? cpu::kernels().quantize.token_f32
          : nullptr;
  const IndexerFrontEnd none;
  const cpu::FrontEndPlan plan = cpu::make_front_end_plan(fe != nullptr ? *fe : none, D);
  // Streaming: sizeof(Elem) bytes read and 1 written per element.
  const int threads = threads_for_work(
      ctx, double(T) * double(H) * double(D) * (double(sizeof(Elem)) + 1.0), kMinBytesPerThread);
  // One fp32 row per thread, allocated before the parallel region (an allocation failure inside
  // it could not be turned into a Status).
  std::vector<float> rows(
      direct != nullptr ? 0 : static_cast<size_t>(threads) * static_cast<size_t>(D));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float* row = rows.data() + (direct != nullptr ? 0 : int64_t(thread_index()) * D);
#pragma omp for collapse(2) schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        uint8_t* dst = &q_fp8(t, h, 0).bits;
        float s;
        if (direct != nullptr) {
          s = direct(reinterpret_cast<const float*>(&q(t, h, 0)), D, scale_mode, dst);
        } else {
          for (int64_t d = 0; d < D; ++d) row[d] = to_float(q(t, h, d));
          const float* cs = plan.rope ? detail::rope_table_row(fe->rope, t, 0) : nullptr;
          s = cpu::front_end_quantize_row(plan, row, D, cs, scale_mode, dst);
        }
        q_s(t, h) = ((weights(t, h) * head_factor) * s) * dim_factor;
      }
    }
  }
  return Status::Ok();
}

template <typename Elem>
Status prepare(TensorView<const Elem, 3> q, TensorView<const float, 2> weights,
               TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s, ScaleMode scale_mode,
               const IndexerFrontEnd* fe, const Context& ctx) {
  return run_entry_point("indexer_q_prepare", ctx, [&]() -> Status {
    QUANTKV_RETURN_IF_ERROR(validate_prepare(q, weights, q_fp8, q_s, scale_mode, fe));
    return run_prepare(q, weights, q_fp8, q_s, scale_mode, fe, ctx);
  });
}

// The one-call arguments of a fixed form (q in the field of its type), for the wrappers below.
template <typename Elem>
IndexerQPrepareArgs fixed_args(TensorView<const Elem, 3> q, TensorView<const float, 2> weights,
                               TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s,
                               ScaleMode mode, const IndexerFrontEnd* fe) {
  IndexerQPrepareArgs a;
  if constexpr (std::is_same_v<Elem, bfloat16>) {
    a.q_bf16 = q;
  } else {
    a.q = q;
  }
  a.weights = weights;
  a.q_fp8 = q_fp8;
  a.q_s = q_s;
  a.scale_mode = mode;
  a.front_end = fe;
  return a;
}

}  // namespace

Status indexer_q_prepare(const IndexerQPrepareArgs& a, const Context& ctx) {
  const bool f32 = given(a.q), bf16 = given(a.q_bf16);
  if (f32 == bf16) {
    return run_entry_point("indexer_q_prepare", ctx, [&] {
      return invalid_argument(
          std::string("q, q_bf16: expected exactly one of the fp32 and the bf16 queries, got ") +
          (f32 ? "both" : "neither"));
    });
  }
  return f32 ? prepare(a.q, a.weights, a.q_fp8, a.q_s, a.scale_mode, a.front_end, ctx)
             : prepare(a.q_bf16, a.weights, a.q_fp8, a.q_s, a.scale_mode, a.front_end, ctx);
}

Status indexer_q_prepare(TensorView<const float, 3> q, TensorView<const float, 2> weights,
                         TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s,
                         ScaleMode scale_mode, const Context& ctx) {
  return indexer_q_prepare(fixed_args(q, weights, q_fp8, q_s, scale_mode, nullptr), ctx);
}

Status indexer_q_prepare(TensorView<const float, 3> q, TensorView<const float, 2> weights,
                         TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s,
                         ScaleMode scale_mode, const IndexerFrontEnd& front_end,
                         const Context& ctx) {
  return indexer_q_prepare(fixed_args(q, weights, q_fp8, q_s, scale_mode, &front_end), ctx);
}

Status indexer_q_prepare(TensorView<const bfloat16, 3> q, TensorView<const float, 2> weights,
                         TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s,
                         ScaleMode scale_mode, const IndexerFrontEnd& front_end,
                         const Context& ctx) {
  return indexer_q_prepare(fixed_args(q, weights, q_fp8, q_s, scale_mode, &front_end), ctx);
}

}  // namespace quantkv
