// Checkpoint loaders (quantkv/checkpoint.hpp) and the weight-only fused QKV in Python.
#include "quantkv/checkpoint.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <variant>

#include "arrays.hpp"
#include "cache.hpp"
#include "prepared.hpp"

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

using Sections = std::tuple<int64_t, int64_t, int64_t>;

QkvSections sections_of(const Sections& s) {
  return {std::get<0>(s), std::get<1>(s), std::get<2>(s)};
}

// A .safetensors file, a sharded checkpoint's index, or a directory holding either.
SafetensorsCheckpoint open_checkpoint(const std::string& path) {
  SafetensorsCheckpoint c;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = SafetensorsCheckpoint::open(path, &c);
  }
  throw_if_error(st);
  return c;
}

// Loads with `load` (the GIL released) and wraps the result.
template <typename Load>
PyQkvCheckpoint load_checkpoint(const std::string& path, Load&& load) {
  const SafetensorsCheckpoint c = open_checkpoint(path);
  QkvCheckpointWeights w;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = load(c, &w);
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

PyQkvCheckpoint load(const std::string& path, const std::string& prefix, int num_threads) {
  return load_checkpoint(path, [&](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
    return load_qkv_weights(c, prefix, w, make_context(num_threads));
  });
}

PyQkvCheckpoint load_fused(const std::string& path, const std::string& projection,
                           const Sections& sections, int num_threads) {
  return load_checkpoint(path, [&](const SafetensorsCheckpoint& c, QkvCheckpointWeights* w) {
    return load_fused_qkv_weights(c, projection, sections_of(sections), w,
                                  make_context(num_threads));
  });
}

py::list list_projections(const std::string& path) {
  const SafetensorsCheckpoint c = open_checkpoint(path);
  py::list out;
  for (const QuantizedProjection& p : list_quantized_projections(c)) {
    py::dict d;
    d["name"] = p.name;
    d["format"] = checkpoint_format_name(p.format);
    d["n"] = p.n;
    d["k"] = p.k;
    d["weight_factor"] = p.weight_factor;
    d["input_global"] = p.input_global;
    d["scale_sections"] = p.scale_sections;
    out.append(d);
  }
  return out;
}

// The float32 [N, K] array of what `dequantize` fills.
template <typename Dequantize>
py::array dequantized(const std::string& path, Dequantize&& dequantize) {
  const SafetensorsCheckpoint c = open_checkpoint(path);
  std::vector<float> w;
  int64_t n = 0, k = 0;
  throw_if_error(dequantize(c, &w, &n, &k));
  py::array out = new_array<float>({n, k});
  std::memcpy(out.mutable_data(), w.data(), w.size() * sizeof(float));
  return out;
}

py::array dequantize(const std::string& path, const std::string& prefix) {
  return dequantized(path, [&](const SafetensorsCheckpoint& c, std::vector<float>* w, int64_t* n,
                               int64_t* k) { return dequantize_qkv_weights(c, prefix, w, n, k); });
}

py::array dequantize_fused(const std::string& path, const std::string& projection,
                           const Sections& sections) {
  return dequantized(
      path, [&](const SafetensorsCheckpoint& c, std::vector<float>* w, int64_t* n, int64_t* k) {
        return dequantize_fused_qkv_weights(c, projection, sections_of(sections), w, n, k);
      });
}

py::object weight_only(py::handle hs_obj, py::handle offs_obj, const PyPreparedQkv& w,
                       py::handle cache, const std::variant<float, Triple>& sf, uint32_t layer_idx,
                       py::object out_obj, int num_threads) {
  py::array hs = as_array(hs_obj, "hidden_state");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  auto hsv = view_of<const bfloat16, 2>(hs, "hidden_state", "[M, K]");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  const PagedKVCacheCollection coll = cache_collection(cache, "kv_cache");
  const int64_t q_dim = w.weights.n - coll.kv_dim * coll.num_heads * coll.head_size;
  if (q_dim < 0) throw py::value_error("weight: N is smaller than the cache's K/V width");
  py::array out =
      out_obj.is_none() ? new_array<bfloat16>({hsv.shape[0], q_dim}) : as_array(out_obj, "out");
  auto outv = view_of<bfloat16, 2>(out, "output", "[M, q_dim]");
  // One factor for every section, or a (q, k, v) triple: the same scale argument as the W4A4 call.
  const Triple section_sf =
      std::holds_alternative<float>(sf)
          ? Triple{std::get<float>(sf), std::get<float>(sf), std::get<float>(sf)}
          : std::get<Triple>(sf);
  const auto& [q, k, v] = section_sf;
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = fused_qkv_matmul_weight_only(hsv, offv, w.weights, SectionScales{q, k, v}, coll, layer_idx,
                                      outv, ctx);
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
        R"doc(Loads PREFIX.q_proj/.k_proj/.v_proj from a checkpoint (NVFP4 compressed-tensors
or ModelOpt, MXFP4 gpt-oss style, MXFP8; docs/checkpoints.md).
path: a .safetensors file, a sharded checkpoint's index (model.safetensors.index.json) or a
directory holding either.
Returns QkvCheckpoint: weights (PreparedQkvWeights), q_rows, k_rows, v_rows,
weight_factor (q, k, v: the weight-only section_sf), input_global (the activation
quantiser's global_scale) and gemm_scales (the W4A4 tensor_sf tuple).)doc");
  m.def("load_fused_qkv_checkpoint", &load_fused, py::arg("path"), py::arg("projection"),
        py::arg("sections"), py::kw_only(), py::arg("num_threads") = 0,
        R"doc(Loads one fused projection (e.g. 'model.layers.0.self_attn.qkv_proj') whose rows are
[q; k; v] of sections = (q_rows, k_rows, v_rows); global scales of shape [] / [1] or [3]
(one per section). path and the result as load_qkv_checkpoint.)doc");
  m.def("list_quantized_projections", &list_projections, py::arg("path"),
        "The quantised projections of a checkpoint (file, index or directory): dicts of name, "
        "format, n, k, weight_factor, input_global, scale_sections (3: per-section global scales, "
        "the factors are the q section's).");
  m.def("dequantize_qkv_checkpoint", &dequantize, py::arg("path"), py::arg("prefix"),
        "The dequantised float32 weight [q_rows + k_rows + v_rows, K] of the same projections.");
  m.def("dequantize_fused_qkv_checkpoint", &dequantize_fused, py::arg("path"),
        py::arg("projection"), py::arg("sections"),
        "The dequantised float32 weight [N, K] of a fused projection (as "
        "load_fused_qkv_checkpoint).");
  m.def("fused_qkv_weight_only", &weight_only, py::arg("hidden_state"),
        py::arg("input_row_offsets"), py::arg("weight"), py::arg("kv_cache"),
        py::arg("section_sf") = 1.0f, py::arg("layer_idx") = 0, py::kw_only(),
        py::arg("out") = py::none(), py::arg("num_threads") = 0,
        R"doc(The fused QKV with bf16 activations (weight-only mode) on a PreparedQkvWeights.

hidden_state: bfloat16 (or uint16 bits) [M, K]; kv_cache: PagedKVCache or PagedCacheView; section_sf: one weight factor or (q, k, v) per section
(QkvCheckpoint.weight_factor). Returns uint16 [M, q_dim] bfloat16 bits of Q; K/V go to the
cache as in fused_qkv_matmul_kv_cache_paged_ragged_scale_float4.)doc");
}

}  // namespace quantkv::python
