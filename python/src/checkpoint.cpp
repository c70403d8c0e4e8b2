// Checkpoint loaders (quantkv/checkpoint.hpp) and the weight-only fused QKV in Python.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>

#include "arrays.hpp"
#include "cache.hpp"
#include "prepared.hpp"
#include "quantkv/checkpoint.hpp"

namespace quantkv::python {
namespace {

using Triple = std::tuple<float, float, float>;

Triple triple(const SectionScales& s) { return {s.q, s.k, s.v}; }

// The loaded q/k/v weights of one attention layer.
struct PyQkvCheckpoint {
  std::string format;
  py::object weights;  // PreparedQkvWeights
  int64_t q_rows = 0, k_rows = 0, v_rows = 0;
  Triple weight_factor, gemm_scales;
  float input_global = 1.0f;
};

SafetensorsFile open_file(const std::string& path) {
  SafetensorsFile f;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = SafetensorsFile::open(path, &f);
  }
  throw_if_error(st);
  return f;
}

PyQkvCheckpoint load(const std::string& path, const std::string& prefix, int num_threads) {
  const SafetensorsFile f = open_file(path);
  QkvCheckpointWeights w;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = load_qkv_weights(f, prefix, &w, make_context(num_threads));
  }
  throw_if_error(st);
  PyQkvCheckpoint out;
  out.format = checkpoint_format_name(w.format);
  out.q_rows = w.q_rows;
  out.k_rows = w.k_rows;
  out.v_rows = w.v_rows;
  out.weight_factor = triple(w.weight_factor);
  out.gemm_scales = triple(w.gemm_scales());
  out.input_global = w.input_global;
  out.weights = py::cast(PyPreparedQkv{std::move(w.weights)});
  return out;
}

py::list list_projections(const std::string& path) {
  const SafetensorsFile f = open_file(path);
  py::list out;
  for (const QuantizedProjection& p : list_quantized_projections(f)) {
    py::dict d;
    d["name"] = p.name;
    d["format"] = checkpoint_format_name(p.format);
    d["n"] = p.n;
    d["k"] = p.k;
    d["weight_factor"] = p.weight_factor;
    d["input_global"] = p.input_global;
    out.append(d);
  }
  return out;
}

py::array dequantize(const std::string& path, const std::string& prefix) {
  const SafetensorsFile f = open_file(path);
  std::vector<float> w;
  int64_t n = 0, k = 0;
  throw_if_error(dequantize_qkv_weights(f, prefix, &w, &n, &k));
  py::array out = new_array<float>({n, k});
  std::memcpy(out.mutable_data(), w.data(), w.size() * sizeof(float));
  return out;
}

py::object weight_only(py::handle hs_obj, py::handle offs_obj, const PyPreparedQkv& w,
                       py::handle cache, const Triple& section_sf, uint32_t layer_idx,
                       py::object out_obj, int num_threads) {
  py::array hs = as_array(hs_obj, "hidden_state");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  auto hsv = view_of<const bfloat16, 2>(hs, "hidden_state", "[M, K]");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  const PagedKVCacheCollection coll = cache_collection(cache, "kv_cache");
  const int64_t q_dim = w.weights.n - coll.kv_dim * coll.num_heads * coll.head_size;
  if (q_dim < 0) throw py::value_error("weight: N is smaller than the cache's K/V width");
  py::array out = out_obj.is_none() ? new_array<bfloat16>({hsv.shape[0], q_dim})
                                    : as_array(out_obj, "out");
  auto outv = view_of<bfloat16, 2>(out, "output", "[M, q_dim]");
  const auto& [q, k, v] = section_sf;
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = fused_qkv_matmul_weight_only(hsv, offv, w.weights, SectionScales{q, k, v}, coll,
                                      layer_idx, outv, ctx);
  }
  throw_if_error(st);
  return out_obj.is_none() ? result_like(out, {hs_obj}, "bfloat16") : out_obj;
}

}  // namespace

void register_checkpoint(py::module_& m) {
  py::class_<PyQkvCheckpoint>(m, "QkvCheckpoint",
                              "One attention layer's q/k/v weights loaded from a checkpoint.")
      .def_readonly("format", &PyQkvCheckpoint::format)
      .def_readonly("weights", &PyQkvCheckpoint::weights)
      .def_readonly("q_rows", &PyQkvCheckpoint::q_rows)
      .def_readonly("k_rows", &PyQkvCheckpoint::k_rows)
      .def_readonly("v_rows", &PyQkvCheckpoint::v_rows)
      .def_readonly("weight_factor", &PyQkvCheckpoint::weight_factor)
      .def_readonly("gemm_scales", &PyQkvCheckpoint::gemm_scales)
      .def_readonly("input_global", &PyQkvCheckpoint::input_global);
  m.def("load_qkv_checkpoint", &load, py::arg("path"), py::arg("prefix"), py::kw_only(),
        py::arg("num_threads") = 0,
        R"doc(Loads PREFIX.q_proj/.k_proj/.v_proj from a .safetensors file (NVFP4 compressed-tensors
or ModelOpt, MXFP4 gpt-oss style, MXFP8; docs/checkpoints.md).
Returns QkvCheckpoint: weights (PreparedQkvWeights), q_rows, k_rows, v_rows,
weight_factor (q, k, v: the weight-only section_sf), input_global (the activation
quantiser's global_scale) and gemm_scales (the W4A4 tensor_sf tuple).)doc");
  m.def("list_quantized_projections", &list_projections, py::arg("path"),
        "The quantised projections of a .safetensors file: dicts of name, format, n, k, "
        "weight_factor, input_global.");
  m.def("dequantize_qkv_checkpoint", &dequantize, py::arg("path"), py::arg("prefix"),
        "The dequantised float32 weight [q_rows + k_rows + v_rows, K] of the same projections.");
  m.def("fused_qkv_weight_only", &weight_only, py::arg("hidden_state"),
        py::arg("input_row_offsets"), py::arg("weight"), py::arg("kv_cache"),
        py::arg("section_sf") = Triple{1.0f, 1.0f, 1.0f}, py::arg("layer_idx") = 0, py::kw_only(),
        py::arg("out") = py::none(), py::arg("num_threads") = 0,
        R"doc(The fused QKV with bf16 activations (weight-only mode) on a PreparedQkvWeights.

hidden_state: bfloat16 (or uint16 bits) [M, K]; kv_cache: PagedKVCache or PagedCacheView; section_sf: (q, k, v) weight factors
(QkvCheckpoint.weight_factor). Returns uint16 [M, q_dim] bfloat16 bits of Q; K/V go to the
cache as in fused_qkv_matmul_kv_cache_paged_ragged_scale_float4.)doc");
}

}  // namespace quantkv::python
