// The plain block-scaled linear layer (quantkv/linear.hpp) and prepare_weights: validation, the
// aliasing checks and the row epilogue around the GEMM core (src/cpu/gemm_driver.hpp), which
// holds every data loop.
#include "quantkv/linear.hpp"

#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "cpu/gemm_driver.hpp"
#include "ops/validate.hpp"

namespace quantkv {
namespace {

Status prepare(const WeightSource& source, PreparedWeights* out, const Context& ctx) {
  if (out == nullptr) return invalid_argument("out: pointer is null");
  int64_t k = 0;
  QUANTKV_RETURN_IF_ERROR(ops::validate_weight_source(source, &k));
  const bool swizzled = given(source.scale);
  const cpu::WeightScaleSource scale =
      swizzled
          ? cpu::WeightScaleSource{source.scale.data, true, 0}
          : cpu::WeightScaleSource{source.scale_rows.data, false, source.scale_rows.strides[0]};
  return cpu::pack_weights(source.data, scale, source.format, k, out, ctx);
}

Status run_linear(const LinearArgs& a, const Context& ctx) {
  if (a.weight != nullptr && !cpu::is_prepared(*a.weight)) {
    return invalid_argument("weight: not a prepared weight (call prepare_weights first)");
  }
  int64_t m = 0;
  QUANTKV_RETURN_IF_ERROR(ops::validate_linear(a, &m));
  const PreparedWeights& w = *a.weight;
  // y is written while everything else is still read.
  const MemoryRange y =
      a.y.data != nullptr ? memory_range("y", a.y) : memory_range("y_f32", a.y_f32);
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(
      y, {memory_range("x", a.x), memory_range("x_scale", a.x_scale),
          memory_range("x_bf16", a.x_bf16), memory_range("column_alpha", a.column_alpha),
          memory_range("bias", a.bias), memory_range("bias_bf16", a.bias_bf16),
          memory_range("weight.data", w.data(), int64_t(w.data_bytes())),
          memory_range("weight.scales", w.scales(), int64_t(w.scale_count() * sizeof(uint16_t)))}));
  if (m == 0) return Status::Ok();
  cpu::GemmActivations acts;
  if (a.x.data != nullptr) {
    cpu::prepare_block_activations(a.x, a.x_scale, w.format, w.k, ctx, &acts);
  } else {
    cpu::prepare_bf16_activations(a.x_bf16, sf_vector_size(w.format), ctx, &acts);
  }
  cpu::RowEpilogue e;
  e.alpha = a.alpha;
  e.column_alpha = a.column_alpha.data;
  e.bias_f32 = a.bias.data;
  e.bias_bf16 = reinterpret_cast<const uint16_t*>(a.bias_bf16.data);
  if (a.y.data != nullptr) {
    e.out_bf16 = reinterpret_cast<uint16_t*>(a.y.data);
    e.out_stride = a.y.strides[0];
  } else {
    e.out_f32 = a.y_f32.data;
    e.out_stride = a.y_f32.strides[0];
  }
  return cpu::run_gemm(m, acts, w, e.plug(), ctx);
}

}  // namespace

Status prepare_weights(const WeightSource& source, PreparedWeights* out, const Context& ctx) {
  return run_entry_point("prepare_weights", ctx, [&] { return prepare(source, out, ctx); });
}

Status linear(const LinearArgs& args, const Context& ctx) {
  return run_entry_point("linear", ctx, [&] { return run_linear(args, ctx); });
}

}  // namespace quantkv
