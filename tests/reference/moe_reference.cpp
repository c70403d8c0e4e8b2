#include "moe_reference.hpp"

#include <cstdlib>
#include <vector>

#include "linear_reference.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::reference {
namespace {

// Row-major scales [n, kb_count] -> the 5-D swizzled layout the GEMM reference reads.
std::vector<uint8_t> swizzle(const uint8_t* rows, int64_t n, int64_t kb_count) {
  const auto shape = swizzled_scale_shape(n, kb_count);
  std::vector<uint8_t> s(std::size_t(shape[0] * shape[1] * shape[2] * shape[3] * shape[4]), 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      s[std::size_t(swizzled_scale_offset(r, kb, kb_count))] = rows[r * kb_count + kb];
    }
  }
  return s;
}

// One row through one weight: y[n] = fl(c * alpha) + bias (fp32), alpha = column_alpha[n] when
// given. `x_bf16` or (quantised) `x32`
// / `x16`: the row is quantised first with global scale g.
void gemm_row(BlockFormat f, int64_t n, int64_t k, const uint16_t* x_bf16, const float* x32,
              bool quantise, float g, const uint8_t* w, const std::vector<uint8_t>& w_scale,
              float alpha, const float* column_alpha, const float* bias, float* y) {
  const int sfv = sf_vector_size(f);
  LinearReferenceArgs r;
  r.format = f;
  r.m = 1;
  r.n = n;
  r.k = k;
  r.weight = w;
  r.weight_scale = make_view(w_scale.data(), swizzled_scale_shape(n, k / sfv));
  r.alpha = alpha;
  r.column_alpha = column_alpha;
  r.bias = bias;
  r.y_f32 = y;
  std::vector<uint8_t> data(std::size_t(row_bytes(f, k)));
  const auto sshape = swizzled_scale_shape(1, k / sfv);
  std::vector<uint8_t> scales(
      std::size_t(sshape[0] * sshape[1] * sshape[2] * sshape[3] * sshape[4]));
  if (quantise) {
    const auto dv = make_view(data.data(), int64_t(1), row_bytes(f, k));
    const auto sv = make_view(scales.data(), sshape);
    const Status st =
        x32 != nullptr
            ? quantize_dynamic_block_scaled(make_view(x32, int64_t(1), k), g, f, dv, sv, {})
            : quantize_dynamic_block_scaled(
                  make_view(reinterpret_cast<const bfloat16*>(x_bf16), int64_t(1), k), g, f, dv, sv,
                  {});
    if (!st.ok()) std::abort();
    r.x = data.data();
    r.x_scale = make_view<const uint8_t>(scales.data(), sshape);
  } else {
    r.x_bf16 = x_bf16;
  }
  linear_reference(r);
}

}  // namespace

void moe_reference(const MoeReferenceArgs& a) {
  const BlockFormat f = a.format;
  const int sfv = sf_vector_size(f);
  const int64_t h_dim = a.hidden, i_dim = a.inter;
  std::vector<float> o(std::size_t(a.t * a.k * h_dim), 0.0f);  // every route's output
  std::vector<float> gu(std::size_t(2 * i_dim)), h32(static_cast<std::size_t>(i_dim));
  std::vector<uint16_t> h16(static_cast<std::size_t>(i_dim));
  for (int64_t e = 0; e < a.experts; ++e) {
    const uint8_t* w13 = a.w13 + e * 2 * i_dim * row_bytes(f, h_dim);
    const uint8_t* w2 = a.w2 + e * h_dim * row_bytes(f, i_dim);
    const std::vector<uint8_t> s13 =
        swizzle(a.w13_scale + e * 2 * i_dim * (h_dim / sfv), 2 * i_dim, h_dim / sfv);
    const std::vector<uint8_t> s2 =
        swizzle(a.w2_scale + e * h_dim * (i_dim / sfv), h_dim, i_dim / sfv);
    const bool q = a.quantize_activations;
    const float f13 = q ? a.w13_alpha[e] / a.x_global[e] : a.w13_alpha[e];
    const float f2 = q ? a.w2_alpha[e] / a.h_global[e] : a.w2_alpha[e];
    // w13's columns: gate's scaled by f13, up's by f3 (the halves or alternate rows).
    const float w3 = a.w3_alpha != nullptr ? a.w3_alpha[e] : a.w13_alpha[e];
    const float f3 = q ? w3 / a.x_global[e] : w3;
    std::vector<float> col13(std::size_t(2 * i_dim));
    for (int64_t i = 0; i < i_dim; ++i) {
      const bool il = a.gate_up == GateUpLayout::kInterleaved;
      col13[std::size_t(il ? 2 * i : i)] = f13;
      col13[std::size_t(il ? 2 * i + 1 : i_dim + i)] = f3;
    }
    for (int64_t t = 0; t < a.t; ++t) {
      for (int64_t j = 0; j < a.k; ++j) {
        if (int64_t(a.topk_ids[t * a.k + j]) - a.expert_offset != e) continue;
        gemm_row(f, 2 * i_dim, h_dim, a.x + t * h_dim, nullptr, q, a.x_global[e], w13, s13, f13,
                 col13.data(), a.w13_bias != nullptr ? a.w13_bias + e * 2 * i_dim : nullptr,
                 gu.data());
        for (int64_t i = 0; i < i_dim; ++i) {
          const bool il = a.gate_up == GateUpLayout::kInterleaved;
          const float gate = il ? gu[2 * i] : gu[i];
          const float up = il ? gu[2 * i + 1] : gu[i_dim + i];
          const float h = moe_activation(a.activation, gate, up, a.swiglu_alpha, a.swiglu_limit);
          h32[i] = h;
          h16[i] = float_to_bf16(h);
        }
        gemm_row(f, h_dim, i_dim, h16.data(), q ? h32.data() : nullptr, q, a.h_global[e], w2, s2,
                 f2, nullptr, a.w2_bias != nullptr ? a.w2_bias + e * h_dim : nullptr,
                 o.data() + (t * a.k + j) * h_dim);
      }
    }
  }
  for (int64_t t = 0; t < a.t; ++t) {
    for (int64_t c = 0; c < h_dim; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < a.k; ++j) {
        const int64_t e = int64_t(a.topk_ids[t * a.k + j]) - a.expert_offset;
        if (e < 0 || e >= a.experts) continue;
        const float p = a.topk_weights[t * a.k + j] * o[std::size_t((t * a.k + j) * h_dim + c)];
        acc = acc + p;
      }
      if (a.y_f32 != nullptr) {
        a.y_f32[t * h_dim + c] = acc;
      } else {
        a.y[t * h_dim + c] = float_to_bf16(acc);
      }
    }
  }
}

}  // namespace quantkv::reference
