// Indexer Q prepare (SPEC §5): q [T, H, D] and head weights [T, H] -> e4m3 q with one scale s
// per (token, head), and q_s = w * H^-0.5 * s * D^-0.5 (DeepSeek-V3.2's order of operations:
// weights * n_heads^-0.5, then * q_scale * softmax_scale), every product rounded to fp32.
#include <cmath>
#include <string>

#include "core/out_of_memory.hpp"
#include "cpu/indexer_quantize.hpp"
#include "cpu/kernels.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv {
namespace {

Status q_prepare(TensorView<const float, 3> q, TensorView<const float, 2> weights,
                 TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s, ScaleMode scale_mode,
                 const Context& ctx) {
  QUANTKV_RETURN_IF_ERROR(check_shape("q", "[T, H, D]", q, {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t T = q.shape[0], H = q.shape[1], D = q.shape[2];
  if (H < 1 || D < 1) {
    return invalid_argument("q: expected H >= 1 and D >= 1, got shape " + format_shape(q.shape.data(), 3));
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("weights", "[T, H]", weights, {T, H}));
  QUANTKV_RETURN_IF_ERROR(check_shape("q_fp8", "[T, H, D]", q_fp8, {T, H, D}));
  QUANTKV_RETURN_IF_ERROR(check_shape("q_s", "[T, H]", q_s, {T, H}));
  if (T > 0 && q_fp8.strides[2] != 1) {
    return invalid_argument("q_fp8: expected the D dimension to be contiguous (stride 1), got stride " +
                            std::to_string(q_fp8.strides[2]));
  }
  if (scale_mode != ScaleMode::kFloat && scale_mode != ScaleMode::kPowerOfTwo) {
    return invalid_argument("scale_mode: expected kFloat or kPowerOfTwo, got " + std::to_string(int(scale_mode)));
  }
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("q_fp8", q_fp8));
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("q_s", q_s));
  const MemoryRange q_range = memory_range("q", q), w_range = memory_range("weights", weights);
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("q_fp8", q_fp8), {q_range, w_range, memory_range("q_s", q_s)}));
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(memory_range("q_s", q_s), {q_range, w_range}));
  const float head_factor = float(1.0 / std::sqrt(double(H)));
  const float dim_factor = float(1.0 / std::sqrt(double(D)));
  const cpu::TokenQuantizeF32 fast =
      D == 1 || q.strides[2] == 1
          ? cpu::kernels().quantize.token_f32
          : nullptr;
  // Streaming: 4 bytes read and 1 written per element.
  const int threads = threads_for_work(ctx, double(T) * double(H) * double(D) * 5.0, kMinBytesPerThread);
#pragma omp parallel for collapse(2) num_threads(threads) if (threads > 1) schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      uint8_t* dst = &q_fp8(t, h, 0).bits;
      const float s = fast != nullptr ? fast(&q(t, h, 0), D, scale_mode, dst)
                                      : cpu::quantize_row([&](int64_t d) { return q(t, h, d); }, D, scale_mode, dst);
      q_s(t, h) = ((weights(t, h) * head_factor) * s) * dim_factor;
    }
  }
  return Status::Ok();
}

}  // namespace

Status indexer_q_prepare(TensorView<const float, 3> q, TensorView<const float, 2> weights,
                         TensorView<float8_e4m3fn, 3> q_fp8, TensorView<float, 2> q_s, ScaleMode scale_mode,
                         const Context& ctx) {
  return catch_out_of_memory("indexer_q_prepare", [&] { return q_prepare(q, weights, q_fp8, q_s, scale_mode, ctx); });
}

}  // namespace quantkv
