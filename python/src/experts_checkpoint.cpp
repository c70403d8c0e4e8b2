// The MoE experts loaders in Python (load_experts, list_quantized_experts in
// quantkv/checkpoint.hpp): the loaded experts come back with the fused_experts keywords they need.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "prepared.hpp"
#include "quantkv/checkpoint.hpp"

namespace quantkv::python {
namespace {

struct PyExpertsCheckpoint {
  std::string format, layout, gate_up, activation;
  py::object experts;            // PreparedExperts
  py::object w13_bias, w2_bias;  // float32 [E, 2I] / [E, H], or None
  int64_t num_experts = 0, hidden = 0, intermediate = 0;
};

const char* gate_up_name(GateUpLayout g) {
  return g == GateUpLayout::kInterleaved ? "interleaved" : "halves";
}

ExpertsCheckpointLayout parse_experts_layout(const std::string& name) {
  if (name == "auto") return ExpertsCheckpointLayout::kAuto;
  if (name == "gpt-oss") return ExpertsCheckpointLayout::kGptOss;
  if (name == "per-expert") return ExpertsCheckpointLayout::kPerExpert;
  throw py::value_error("layout: expected 'auto', 'gpt-oss' or 'per-expert', got '" + name + "'");
}

py::object float_matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
  if (v.empty()) return py::none();
  py::array out = new_array<float>({rows, cols});
  std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(float));
  return out;
}

SafetensorsCheckpoint open_path(const std::string& path) {
  SafetensorsCheckpoint c;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = SafetensorsCheckpoint::open(path, &c);
  }
  throw_if_error(st);
  return c;
}

PyExpertsCheckpoint load(const std::string& path, const std::string& prefix,
                         const std::string& layout, int num_threads) {
  const ExpertsCheckpointLayout l = parse_experts_layout(layout);
  const SafetensorsCheckpoint c = open_path(path);
  LoadedExperts w;
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = load_experts(c, prefix, &w, ctx, l);
  }
  throw_if_error(st);
  PyExpertsCheckpoint out;
  out.format = checkpoint_format_name(w.format);
  out.layout = experts_layout_name(w.layout);
  out.gate_up = gate_up_name(w.gate_up);
  out.activation = w.activation == MoeActivation::kSwigluOai ? "swiglu_oai" : "silu";
  out.num_experts = w.experts.num_experts();
  out.hidden = w.experts.hidden();
  out.intermediate = w.experts.intermediate();
  out.w13_bias = float_matrix(w.w13_bias, out.num_experts, 2 * out.intermediate);
  out.w2_bias = float_matrix(w.w2_bias, out.num_experts, out.hidden);
  out.experts = py::cast(PyPreparedExperts{std::move(w.experts)});
  return out;
}

py::list list_experts(const std::string& path) {
  const SafetensorsCheckpoint c = open_path(path);
  py::list out;
  for (const QuantizedExperts& e : list_quantized_experts(c)) {
    py::dict d;
    d["prefix"] = e.prefix;
    d["layout"] = experts_layout_name(e.layout);
    d["format"] = checkpoint_format_name(e.format);
    d["num_experts"] = e.num_experts;
    d["hidden"] = e.hidden;
    d["intermediate"] = e.intermediate;
    d["gate_up"] = gate_up_name(e.gate_up);
    d["has_bias"] = e.has_bias;
    out.append(d);
  }
  return out;
}

}  // namespace

void register_experts_checkpoint(py::module_& m) {
  py::class_<PyExpertsCheckpoint>(m, "ExpertsCheckpoint",
                                  "One layer's experts loaded from a checkpoint, with the "
                                  "fused_experts keywords they need.")
      .def_readonly("format", &PyExpertsCheckpoint::format)
      .def_readonly("layout", &PyExpertsCheckpoint::layout)
      .def_readonly("experts", &PyExpertsCheckpoint::experts)
      .def_readonly("gate_up", &PyExpertsCheckpoint::gate_up)
      .def_readonly("activation", &PyExpertsCheckpoint::activation)
      .def_readonly("w13_bias", &PyExpertsCheckpoint::w13_bias)
      .def_readonly("w2_bias", &PyExpertsCheckpoint::w2_bias)
      .def_readonly("num_experts", &PyExpertsCheckpoint::num_experts)
      .def_readonly("hidden", &PyExpertsCheckpoint::hidden)
      .def_readonly("intermediate", &PyExpertsCheckpoint::intermediate);
  m.def("load_experts_checkpoint", &load, py::arg("path"), py::arg("prefix"), py::kw_only(),
        py::arg("layout") = "auto", py::arg("num_threads") = 0,
        R"doc(Loads one layer's MoE experts (docs/checkpoints.md): prefix as
list_quantized_experts names it ('model.layers.0.mlp.experts', 'block.0.mlp'); layout 'auto'
(detected), 'gpt-oss' (stacked MXFP4) or 'per-expert' (experts.{e}.gate_proj / up_proj /
down_proj in any projection layout). path: a .safetensors file, an index or a directory.
Returns ExpertsCheckpoint: experts (PreparedExperts), gate_up and activation (fused_experts'
keywords), w13_bias / w2_bias (float32 [E, 2I] / [E, H] or None), format, layout, num_experts,
hidden, intermediate.)doc");
  m.def("list_quantized_experts", &list_experts, py::arg("path"),
        "The MoE expert groups of a checkpoint (file, index or directory): dicts of prefix, "
        "layout, format, num_experts, hidden, intermediate, gate_up, has_bias.");
}

}  // namespace quantkv::python
