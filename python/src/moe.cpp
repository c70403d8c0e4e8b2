// Python bindings of the fused experts and prepare_experts (quantkv/moe.hpp; docs/moe.md).
#include "quantkv/moe.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "prepared.hpp"

namespace quantkv::python {
namespace {

TensorView<const float, 1> factors(const std::optional<std::vector<float>>& v) {
  if (!v.has_value()) return {};
  return make_view<const float>(v->data(), int64_t(v->size()));
}

PyPreparedExperts prepare(py::handle w13_obj, py::handle s13_obj, py::handle w2_obj,
                          py::handle s2_obj, const std::string& format_name,
                          const std::optional<std::vector<float>>& w13_alpha,
                          const std::optional<std::vector<float>>& w2_alpha,
                          const std::optional<std::vector<float>>& x_global,
                          const std::optional<std::vector<float>>& h_global,
                          const std::optional<std::vector<float>>& w3_alpha, int num_threads) {
  ExpertsSource s;
  s.format = parse_format(format_name);
  py::array w13 = as_array(w13_obj, "w13"), s13 = as_array(s13_obj, "w13_scale");
  py::array w2 = as_array(w2_obj, "w2"), s2 = as_array(s2_obj, "w2_scale");
  s.w13 = view_of<const uint8_t, 3>(w13, "w13", "[E, 2I, row_bytes(H)]");
  s.w13_scale = view_of<const uint8_t, 3>(s13, "w13_scale", "[E, 2I, H / SFV]");
  s.w2 = view_of<const uint8_t, 3>(w2, "w2", "[E, H, row_bytes(I)]");
  s.w2_scale = view_of<const uint8_t, 3>(s2, "w2_scale", "[E, H, I / SFV]");
  s.w13_alpha = factors(w13_alpha);
  s.w2_alpha = factors(w2_alpha);
  s.x_global = factors(x_global);
  s.h_global = factors(h_global);
  s.w3_alpha = factors(w3_alpha);
  const Context ctx = make_context(num_threads);
  PyPreparedExperts out;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = prepare_experts(s, &out.experts, ctx);
  }
  throw_if_error(st);
  return out;
}

GateUpLayout parse_layout(const std::string& name) {
  if (name == "halves") return GateUpLayout::kHalves;
  if (name == "interleaved") return GateUpLayout::kInterleaved;
  throw py::value_error("gate_up: expected 'halves' or 'interleaved', got '" + name + "'");
}

MoeActivation parse_activation(const std::string& name) {
  if (name == "silu") return MoeActivation::kSiluGated;
  if (name == "swiglu_oai") return MoeActivation::kSwigluOai;
  throw py::value_error("activation: expected 'silu' or 'swiglu_oai', got '" + name + "'");
}

// topk_ids as int32 (int64 ids, as torch.topk returns them, are converted; values that do not
// fit in int32 raise).
py::array int32_ids(py::handle obj) {
  py::array a = as_array(obj, "topk_ids");
  if (has_dtype<int32_t>(a)) return a;
  const py::dtype dt = a.dtype();
  if (dt.kind() != 'i' && dt.kind() != 'u') {
    throw py::type_error("topk_ids: expected an integer array, got dtype " +
                         dt.attr("name").cast<std::string>());
  }
  py::module_ np = py::module_::import("numpy");
  if (a.size() > 0) {
    const auto lo = a.attr("min")().cast<int64_t>(), hi = a.attr("max")().cast<int64_t>();
    if (lo < INT32_MIN || hi > INT32_MAX) {
      throw py::value_error("topk_ids: expected ids that fit in int32");
    }
  }
  return a.attr("astype")(np.attr("int32"));
}

py::object fused_experts_op(py::handle x_obj, py::handle ids_obj, py::handle weights_obj,
                            const PyPreparedExperts& experts, int64_t expert_offset,
                            bool quantize_activations, const std::string& gate_up,
                            const std::string& activation, float swiglu_alpha, float swiglu_limit,
                            py::handle w13_bias_obj, py::handle w2_bias_obj, py::object out_obj,
                            const std::string& out_dtype, int num_threads) {
  FusedExpertsArgs a;
  a.experts = &experts.experts;
  a.expert_offset = expert_offset;
  a.quantize_activations = quantize_activations;
  a.gate_up = parse_layout(gate_up);
  a.activation = parse_activation(activation);
  a.swiglu_alpha = swiglu_alpha;
  a.swiglu_limit = swiglu_limit;
  py::array x = as_array(x_obj, "x");
  a.x = view_of<const bfloat16, 2>(x, "x", "[T, H] bfloat16");
  py::array ids = int32_ids(ids_obj);
  a.topk_ids = view_of<const int32_t, 2>(ids, "topk_ids", "[T, k]");
  py::array weights = as_array(weights_obj, "topk_weights");
  a.topk_weights = view_of<const float, 2>(weights, "topk_weights", "[T, k] float32");
  py::array b13, b2, out;
  if (!w13_bias_obj.is_none()) {
    b13 = as_array(w13_bias_obj, "w13_bias");
    a.w13_bias = view_of<const float, 2>(b13, "w13_bias", "[E, 2I] float32");
  }
  if (!w2_bias_obj.is_none()) {
    b2 = as_array(w2_bias_obj, "w2_bias");
    a.w2_bias = view_of<const float, 2>(b2, "w2_bias", "[E, H] float32");
  }
  const int64_t t = a.x.shape[0], h = experts.experts.hidden();
  bool f32 = false;
  out = gemm_output(out_obj, out_dtype, t, h, &f32);
  if (f32) {
    a.y_f32 = view_of<float, 2>(out, "out", "[T, H]");
  } else {
    a.y = view_of<bfloat16, 2>(out, "out", "[T, H]");
  }
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = fused_experts(a, ctx);
  }
  throw_if_error(st);
  if (!out_obj.is_none()) return out_obj;
  return f32 ? result_like(out, {x_obj}) : result_like(out, {x_obj}, "bfloat16");
}

}  // namespace

void register_moe(py::module_& m) {
  py::class_<PyPreparedExperts>(m, "PreparedExperts",
                                "A layer's experts packed once for fused_experts.")
      .def_property_readonly("num_experts",
                             [](const PyPreparedExperts& p) { return p.experts.num_experts(); })
      .def_property_readonly("hidden",
                             [](const PyPreparedExperts& p) { return p.experts.hidden(); })
      .def_property_readonly("intermediate",
                             [](const PyPreparedExperts& p) { return p.experts.intermediate(); });
  m.def("prepare_experts", &prepare, py::arg("w13"), py::arg("w13_scale"), py::arg("w2"),
        py::arg("w2_scale"), py::kw_only(), py::arg("format") = "nvfp4",
        py::arg("w13_alpha") = py::none(), py::arg("w2_alpha") = py::none(),
        py::arg("x_global") = py::none(), py::arg("h_global") = py::none(),
        py::arg("w3_alpha") = py::none(), py::arg("num_threads") = 0,
        R"doc(Packs a layer's experts once for fused_experts (docs/moe.md).

w13: uint8 [E, 2I, row_bytes(H)] (gate and up stacked), w13_scale: uint8 [E, 2I, H / SFV]
row-major; w2: uint8 [E, H, row_bytes(I)], w2_scale: uint8 [E, H, I / SFV]. The per-expert
factors ([E] floats, default 1): w13_alpha / w2_alpha the weights' own factors (1 / g_w NVFP4),
x_global / h_global the NVFP4 activation global scales of the quantised mode; w3_alpha up's own
factor where gate and up have different global scales (default: w13_alpha for both halves).
Returns PreparedExperts.)doc");
  m.def("fused_experts", &fused_experts_op, py::arg("x"), py::arg("topk_ids"),
        py::arg("topk_weights"), py::arg("experts"), py::kw_only(), py::arg("expert_offset") = 0,
        py::arg("quantize_activations") = false, py::arg("gate_up") = "halves",
        py::arg("activation") = "silu", py::arg("swiglu_alpha") = 1.702f,
        py::arg("swiglu_limit") = 7.0f, py::arg("w13_bias") = py::none(),
        py::arg("w2_bias") = py::none(), py::arg("out") = py::none(),
        py::arg("out_dtype") = "bfloat16", py::arg("num_threads") = 0,
        R"doc(The mixture-of-experts layer (docs/moe.md): y[t] = sum over slots j of
topk_weights[t, j] * expert_e(x[t]), e = topk_ids[t, j] - expert_offset (ids outside the local
experts are skipped), each expert w2 . act(w13 . x + b13) + b2.

x: bfloat16 [T, H]; topk_ids: integers [T, k] (int64 converted); topk_weights: float32 [T, k];
quantize_activations: W4A4 / W8A8 (x and h quantised per routed row) instead of weight-only;
gate_up: 'halves' or 'interleaved' (gpt-oss); activation: 'silu' or 'swiglu_oai' (gpt-oss, with
swiglu_alpha and swiglu_limit); w13_bias float32 [E, 2I], w2_bias float32 [E, H]. Returns
bfloat16 (or float32 with out_dtype='float32') [T, H] in the caller's framework, or fills
`out`.)doc");
}

}  // namespace quantkv::python
