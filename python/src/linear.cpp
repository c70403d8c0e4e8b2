// Python bindings of the plain linear layer, prepare_weights and the linear-layer checkpoint
// loader (quantkv/linear.hpp, quantkv/checkpoint.hpp; docs/linear.md).
#include "quantkv/linear.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <variant>
#include <vector>

#include "arrays.hpp"
#include "prepared.hpp"
#include "quantkv/checkpoint.hpp"

namespace quantkv::python {
namespace {

PyPreparedQkv prepare(py::handle w_obj, py::handle scale_obj, py::handle rows_obj,
                      const std::string& format_name, int num_threads) {
  WeightSource s;
  s.format = parse_format(format_name);
  py::array w = as_array(w_obj, "weight");
  s.data = view_of<const uint8_t, 2>(w, "weight", "[N, row_bytes(K)]");
  py::array scale, rows;
  if (scale_obj.is_none() == rows_obj.is_none()) {
    throw py::value_error(
        "scale, scale_rows: expected exactly one of the swizzled scales and the row-major "
        "[N, K / SF_VECTOR_SIZE] scales");
  }
  if (!scale_obj.is_none()) {
    scale = as_array(scale_obj, "scale");
    s.scale = view_of<const uint8_t, 5>(scale, "scale", "[N/128, Kb/4, 32, 4, 4]");
  } else {
    rows = as_array(rows_obj, "scale_rows");
    s.scale_rows = view_of<const uint8_t, 2>(rows, "scale_rows", "[N, Kb]");
  }
  const Context ctx = make_context(num_threads);
  PyPreparedQkv out;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = prepare_weights(s, &out.weights, ctx);
  }
  throw_if_error(st);
  return out;
}

py::object linear_op(py::handle x_obj, const PyPreparedQkv& w, py::handle x_scale_obj, float alpha,
                     py::handle column_alpha_obj, py::handle bias_obj, py::object out_obj,
                     const std::string& out_dtype, int num_threads) {
  LinearArgs a;
  a.weight = &w.weights;
  a.alpha = alpha;
  py::array x = as_array(x_obj, "x");
  py::array x_scale, column_alpha, bias, out;
  if (!x_scale_obj.is_none()) {
    x_scale = as_array(x_scale_obj, "x_scale");
    a.x = view_of<const uint8_t, 2>(x, "x", "[M, row_bytes(K)]");
    a.x_scale = view_of<const uint8_t, 5>(x_scale, "x_scale", "[M/128, Kb/4, 32, 4, 4]");
  } else {
    a.x_bf16 = view_of<const bfloat16, 2>(x, "x",
                                          "[M, K] bfloat16 (weight-only; quantised x "
                                          "needs x_scale)");
  }
  if (!column_alpha_obj.is_none()) {
    column_alpha = as_array(column_alpha_obj, "column_alpha");
    a.column_alpha = view_of<const float, 1>(column_alpha, "column_alpha", "[N]");
  }
  if (!bias_obj.is_none()) {
    bias = as_array(bias_obj, "bias");
    if (has_dtype<float>(bias)) {
      a.bias = view_of<const float, 1>(bias, "bias", "[N]");
    } else {
      a.bias_bf16 = view_of<const bfloat16, 1>(bias, "bias", "[N]");
    }
  }
  const int64_t m = a.x.data != nullptr || a.x.shape[0] != 0 ? a.x.shape[0] : a.x_bf16.shape[0];
  bool f32 = false;
  out = gemm_output(out_obj, out_dtype, m, w.weights.n, &f32);
  if (f32) {
    a.y_f32 = view_of<float, 2>(out, "out", "[M, N]");
  } else {
    a.y = view_of<bfloat16, 2>(out, "out", "[M, N]");
  }
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = linear(a, ctx);
  }
  throw_if_error(st);
  if (!out_obj.is_none()) return out_obj;
  return f32 ? result_like(out, {x_obj}) : result_like(out, {x_obj}, "bfloat16");
}

struct PyLinearCheckpoint {
  std::string format;
  py::object weights;  // PreparedQkvWeights
  std::vector<int64_t> section_rows;
  std::vector<float> weight_factor;
  float input_global = 1.0f;
  std::vector<float> column_factors_w4a4, column_factors_weight_only;
};

PyLinearCheckpoint load_linear(const std::string& path,
                               const std::variant<std::string, std::vector<std::string>>& names,
                               int num_threads) {
  SafetensorsCheckpoint c;
  throw_if_error(SafetensorsCheckpoint::open(path, &c));
  LinearCheckpointWeights w;
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    if (const std::string* one = std::get_if<std::string>(&names)) {
      st = load_linear_weights(c, *one, &w, ctx);
    } else {
      st = load_stacked_linear_weights(c, std::get<std::vector<std::string>>(names), &w, ctx);
    }
  }
  throw_if_error(st);
  PyLinearCheckpoint out;
  out.format = checkpoint_format_name(w.format);
  out.section_rows = w.section_rows;
  out.weight_factor = w.weight_factor;
  out.input_global = w.input_global;
  out.column_factors_w4a4 = w.column_factors(false);
  out.column_factors_weight_only = w.column_factors(true);
  out.weights = py::cast(PyPreparedQkv{std::move(w.weights)});
  return out;
}

}  // namespace

void register_linear(py::module_& m) {
  m.def("prepare_weights", &prepare, py::arg("weight"), py::kw_only(),
        py::arg("scale") = py::none(), py::arg("scale_rows") = py::none(),
        py::arg("format") = "nvfp4", py::arg("num_threads") = 0,
        R"doc(Packs a weight once for every GEMM entry point (linear, the fused QKV).

weight: uint8 [N, K/2] packed e2m1 ('nvfp4', 'mxfp4') or [N, K] e4m3 ('mxfp8');
exactly one of scale (uint8 5-D swizzled [ceil(N/128), ceil(Kb/4), 32, 4, 4]) and scale_rows
(uint8 / float8 [N, Kb] row-major, as checkpoints store them). Returns PreparedQkvWeights.)doc");
  m.def("linear", &linear_op, py::arg("x"), py::arg("weight"), py::kw_only(),
        py::arg("x_scale") = py::none(), py::arg("alpha") = 1.0f,
        py::arg("column_alpha") = py::none(), py::arg("bias") = py::none(),
        py::arg("out") = py::none(), py::arg("out_dtype") = "bfloat16", py::arg("num_threads") = 0,
        R"doc(y = x . W^T (+ bias) on prepared weights (docs/linear.md).

x: quantised uint8 [M, row_bytes(K)] with x_scale (W4A4 NVFP4 / MXFP4, MXFP8: what
quantize_dynamic_block_scaled returns), or bfloat16 [M, K] without x_scale (weight-only W4A16 /
W8A16). alpha: every column's factor (1 / (g_x g_w) W4A4 NVFP4, 1 / g_w weight-only, 1 for MX),
or column_alpha float32 [N] one per column. bias: float32 or bfloat16 [N]. Returns bfloat16 (or
float32 with out_dtype='float32') [M, N] in the caller's framework, or fills `out`.)doc");
  py::class_<PyLinearCheckpoint>(m, "LinearCheckpoint",
                                 "One linear layer (or several stacked) loaded from a checkpoint.")
      .def_readonly("format", &PyLinearCheckpoint::format)
      .def_readonly("weights", &PyLinearCheckpoint::weights)
      .def_readonly("section_rows", &PyLinearCheckpoint::section_rows)
      .def_readonly("weight_factor", &PyLinearCheckpoint::weight_factor)
      .def_readonly("input_global", &PyLinearCheckpoint::input_global)
      .def_readonly("column_factors_w4a4", &PyLinearCheckpoint::column_factors_w4a4)
      .def_readonly("column_factors_weight_only", &PyLinearCheckpoint::column_factors_weight_only);
  m.def("load_linear_checkpoint", &load_linear, py::arg("path"), py::arg("projections"),
        py::kw_only(), py::arg("num_threads") = 0,
        R"doc(Loads one projection by name (e.g. 'model.layers.0.mlp.down_proj', as
list_quantized_projections names it) or several stacked row-wise (a list, e.g. gate_proj then
up_proj), each keeping its own weight factor. path: a .safetensors file, an index or a directory.
Returns LinearCheckpoint: weights (PreparedQkvWeights), section_rows, weight_factor (per
section), input_global (the activation quantiser's global_scale), column_factors_w4a4 and
column_factors_weight_only ([N]: linear's column_alpha for each mode).)doc");
}

}  // namespace quantkv::python
