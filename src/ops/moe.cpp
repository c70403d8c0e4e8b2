// The fused experts (quantkv/moe.hpp) and prepare_experts: validation and the aliasing checks
// around the CPU loops (src/cpu/moe_driver.hpp), which run the GEMM core per expert.
#include "quantkv/moe.hpp"

#include <cmath>
#include <string>

#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "cpu/gemm_driver.hpp"
#include "cpu/moe_driver.hpp"
#include "ops/validate.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

float factor_or_one(const TensorView<const float, 1>& v, int64_t e) {
  return v.data == nullptr ? 1.0f : v(e);
}

// One expert's weight: a 2-D slice of the stacked codes and row-major scales.
Status prepare_one(const TensorView<const uint8_t, 3>& data,
                   const TensorView<const uint8_t, 3>& scale, int64_t e, BlockFormat f,
                   const char* name, PreparedWeights* out, const Context& ctx) {
  WeightSource s;
  s.data = {data.data + e * data.strides[0],
            {data.shape[1], data.shape[2]},
            {data.strides[1], data.strides[2]}};
  s.scale_rows = {scale.data + e * scale.strides[0],
                  {scale.shape[1], scale.shape[2]},
                  {scale.strides[1], scale.strides[2]}};
  s.format = f;
  Status st = prepare_weights(s, out, ctx);
  if (st.ok()) return st;
  return {st.code(), std::string(name) + " of expert " + str(e) + ": " + st.message()};
}

Status prepare(const ExpertsSource& s, PreparedExperts* out, const Context& ctx) {
  if (out == nullptr) return invalid_argument("out: pointer is null");
  *out = PreparedExperts{};
  int64_t hidden = 0, inter = 0;
  QUANTKV_RETURN_IF_ERROR(ops::validate_experts_source(s, &hidden, &inter));
  const BlockFormat f = s.format;
  const int64_t experts = s.w13.shape[0];
  PreparedExperts p;
  p.w13.resize(std::size_t(experts));
  p.w2.resize(std::size_t(experts));
  for (int64_t e = 0; e < experts; ++e) {
    QUANTKV_RETURN_IF_ERROR(
        prepare_one(s.w13, s.w13_scale, e, f, "source.w13", &p.w13[std::size_t(e)], ctx));
    QUANTKV_RETURN_IF_ERROR(
        prepare_one(s.w2, s.w2_scale, e, f, "source.w2", &p.w2[std::size_t(e)], ctx));
    p.w13_alpha.push_back(factor_or_one(s.w13_alpha, e));
    p.w2_alpha.push_back(factor_or_one(s.w2_alpha, e));
    if (s.w3_alpha.data != nullptr) p.w3_alpha.push_back(s.w3_alpha(e));
    p.x_global.push_back(factor_or_one(s.x_global, e));
    p.h_global.push_back(factor_or_one(s.h_global, e));
  }
  *out = std::move(p);
  return Status::Ok();
}

// A PreparedExperts as prepare_experts makes it: E > 0 experts of one format and shape.
Status check_experts(const PreparedExperts& ex) {
  const int64_t experts = ex.num_experts();
  if (experts == 0) return invalid_argument("experts: no experts (call prepare_experts first)");
  const auto n = std::size_t(experts);
  if (ex.w2.size() != n || ex.w13_alpha.size() != n || ex.w2_alpha.size() != n ||
      ex.x_global.size() != n || ex.h_global.size() != n) {
    return invalid_argument("experts: expected w13, w2 and the factor vectors of " + str(experts) +
                            " experts each, got w2 " + str(int64_t(ex.w2.size())) + ", w13_alpha " +
                            str(int64_t(ex.w13_alpha.size())) + ", w2_alpha " +
                            str(int64_t(ex.w2_alpha.size())) + ", x_global " +
                            str(int64_t(ex.x_global.size())) + ", h_global " +
                            str(int64_t(ex.h_global.size())));
  }
  if (!ex.w3_alpha.empty() && ex.w3_alpha.size() != n) {
    return invalid_argument("experts.w3_alpha: expected none or one factor per expert (" +
                            str(experts) + "), got " + str(int64_t(ex.w3_alpha.size())));
  }
  const BlockFormat f = ex.w13[0].format;
  const int64_t hidden = ex.hidden(), inter = ex.intermediate();
  for (std::size_t e = 0; e < n; ++e) {
    const PreparedWeights &a = ex.w13[e], &b = ex.w2[e];
    if (!cpu::is_prepared(a) || !cpu::is_prepared(b) || a.format != f || b.format != f ||
        a.k != hidden || a.n != 2 * inter || b.k != inter || b.n != hidden) {
      return invalid_argument(
          "experts: expert " + str(int64_t(e)) +
          " is not a prepared expert of the layer's format and shape (H = " + str(hidden) +
          ", I = " + str(inter) + "; call prepare_experts first)");
    }
    if (!std::isfinite(ex.w13_alpha[e]) || !std::isfinite(ex.w2_alpha[e]) ||
        !std::isfinite(ex.x_global[e]) || !(ex.x_global[e] > 0.0f) ||
        !std::isfinite(ex.h_global[e]) || !(ex.h_global[e] > 0.0f) ||
        (!ex.w3_alpha.empty() && !std::isfinite(ex.w3_alpha[e]))) {
      return invalid_argument("experts: expert " + str(int64_t(e)) +
                              ": expected finite factors and global scales > 0");
    }
  }
  return Status::Ok();
}

Status run(const FusedExpertsArgs& a, const Context& ctx) {
  if (a.experts == nullptr) return invalid_argument("experts: pointer is null");
  QUANTKV_RETURN_IF_ERROR(check_experts(*a.experts));
  QUANTKV_RETURN_IF_ERROR(ops::validate_fused_experts(a));
  const PreparedExperts& ex = *a.experts;
  // y is written last, but every input is read before it: it may not overlap any of them.
  const MemoryRange y =
      a.y.data != nullptr ? memory_range("y", a.y) : memory_range("y_f32", a.y_f32);
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(
      y, {memory_range("x", a.x), memory_range("topk_ids", a.topk_ids),
          memory_range("topk_weights", a.topk_weights), memory_range("w13_bias", a.w13_bias),
          memory_range("w2_bias", a.w2_bias)}));
  for (std::size_t e = 0; e < ex.w13.size(); ++e) {
    const PreparedWeights &w13 = ex.w13[e], &w2 = ex.w2[e];
    QUANTKV_RETURN_IF_ERROR(check_no_overlap(
        y, {memory_range("experts.w13.data", w13.data(), int64_t(w13.data_bytes())),
            memory_range("experts.w13.scales", w13.scales(),
                         int64_t(w13.scale_count() * sizeof(uint16_t))),
            memory_range("experts.w2.data", w2.data(), int64_t(w2.data_bytes())),
            memory_range("experts.w2.scales", w2.scales(),
                         int64_t(w2.scale_count() * sizeof(uint16_t)))}));
  }
  const int64_t n = ex.num_experts();
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(
      y, {memory_range("experts.w13_alpha", ex.w13_alpha.data(), n * int64_t(sizeof(float))),
          memory_range("experts.w2_alpha", ex.w2_alpha.data(), n * int64_t(sizeof(float))),
          memory_range("experts.x_global", ex.x_global.data(), n * int64_t(sizeof(float))),
          memory_range("experts.h_global", ex.h_global.data(), n * int64_t(sizeof(float))),
          memory_range("experts.w3_alpha", ex.w3_alpha.data(),
                       int64_t(ex.w3_alpha.size() * sizeof(float)))}));
  if (a.x.shape[0] == 0) return Status::Ok();
  return cpu::run_fused_experts(a, ctx);
}

}  // namespace

Status prepare_experts(const ExpertsSource& source, PreparedExperts* out, const Context& ctx) {
  return run_entry_point("prepare_experts", ctx, [&] {
    Status st = prepare(source, out, ctx);
    if (!st.ok() && out != nullptr) *out = PreparedExperts{};
    return st;
  });
}

Status fused_experts(const FusedExpertsArgs& args, const Context& ctx) {
  return run_entry_point("fused_experts", ctx, [&] { return run(args, ctx); });
}

}  // namespace quantkv
