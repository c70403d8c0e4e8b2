// The operations for Python: the indexer (contract §3), the fused QKV projection (contract §4) and
// their companions (contract §5). Arguments are checked by the library (its messages become
// ValueError); the GIL is released while a kernel runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <optional>
#include <string>
#include <variant>

#include "arrays.hpp"
#include "cache.hpp"
#include "prepared.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/indexer.hpp"
#include "quantkv/qkv_fp4.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::python {

BlockFormat parse_format(std::string name) {
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (name == "nvfp4") return BlockFormat::kNVFP4;
  if (name == "mxfp4") return BlockFormat::kMXFP4;
  if (name == "mxfp8") return BlockFormat::kMXFP8;
  throw py::value_error("format: expected 'nvfp4', 'mxfp4' or 'mxfp8', got '" + name + "'");
}

namespace {

// Runs `fn(view)` with x as a float32 view or (uint16 arrays) a bf16 view of rank `Rank`.
template <int Rank, typename Fn>
void with_float_or_bf16(const py::array& x, const char* name, const char* dims, Fn&& fn) {
  if (has_dtype<float>(x)) {
    fn(view_of<const float, Rank>(x, name, dims));
  } else if (has_dtype<bfloat16>(x)) {
    fn(view_of<const bfloat16, Rank>(x, name, dims));
  } else {
    detail::throw_dtype(x, name, "float32, bfloat16 or uint16 (bfloat16 bits)");
  }
}

// --------------------------------------------------------------------- quantiser
py::tuple quantize(py::handle x_obj, const std::string& format_name, float global_scale,
                   int num_threads) {
  const BlockFormat format = parse_format(format_name);
  py::array x = as_array(x_obj, "x");
  if (x.ndim() != 2) detail::check_layout(x, "x", "[M, K]", 2, false);  // raises
  const int64_t m = x.shape(0), k = x.shape(1);
  const int sfv = sf_vector_size(format);
  if (k % sfv != 0) {
    throw py::value_error("x: expected K % " + std::to_string(sfv) + " == 0 for " +
                          block_format_name(format) + ", got K = " + std::to_string(k));
  }
  const auto sshape = swizzled_scale_shape(m, k / sfv);
  py::array data = new_array<uint8_t>({m, row_bytes(format, k)});
  py::array scales = new_array<uint8_t>({sshape[0], sshape[1], sshape[2], sshape[3], sshape[4]});
  auto d = view_of<uint8_t, 2>(data, "data", "[M, row_bytes(K)]");
  auto s = view_of<uint8_t, 5>(scales, "scales", "[M/128, Kb/4, 32, 4, 4]");
  const Context ctx = make_context(num_threads);
  with_float_or_bf16<2>(x, "x", "[M, K]", [&](auto view) {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = quantize_dynamic_block_scaled(view, global_scale, format, d, s, ctx);
    }
    throw_if_error(st);
  });
  // torch callers get typed tensors: e2m1 pairs (uint8 bits) or e4m3 data, e4m3/e8m0 scales.
  const bool mx = format != BlockFormat::kNVFP4;
  return py::make_tuple(
      result_like(data, {x_obj},
                  format == BlockFormat::kMXFP8 ? "float8_e4m3fn" : "float4_e2m1fn_x2"),
      result_like(scales, {x_obj}, mx ? "float8_e8m0fnu" : "float8_e4m3fn"));
}

// --------------------------------------------------------------------- indexer companions
py::tuple q_prepare(py::handle q_obj, py::handle w_obj, const std::string& mode, int num_threads) {
  py::array q = as_array(q_obj, "q");
  py::array w = as_array(w_obj, "weights");
  auto qv = view_of<const float, 3>(q, "q", "[T, H, D]");
  auto wv = view_of<const float, 2>(w, "weights", "[T, H]");
  py::array q8 = new_array<uint8_t>({qv.shape[0], qv.shape[1], qv.shape[2]});
  py::array qs = new_array<float>({qv.shape[0], qv.shape[1]});
  auto q8v = view_of<float8_e4m3fn, 3>(q8, "q_fp8", "[T, H, D]");
  auto qsv = view_of<float, 2>(qs, "q_s", "[T, H]");
  const ScaleMode scale_mode = parse_scale_mode(mode);
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = indexer_q_prepare(qv, wv, q8v, qsv, scale_mode, ctx);
  }
  throw_if_error(st);
  return py::make_tuple(result_like(q8, {q_obj, w_obj}, "float8_e4m3fn"),
                        result_like(qs, {q_obj, w_obj}));
}

void k_store(py::handle k_obj, py::handle offs_obj, py::handle cache, uint32_t layer_idx,
             const std::string& mode, int num_threads) {
  py::array k = as_array(k_obj, "k");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  const PagedKVCacheCollection coll = cache_collection(cache, "cache");
  const ScaleMode scale_mode = parse_scale_mode(mode);
  const Context ctx = make_context(num_threads);
  with_float_or_bf16<2>(k, "k", "[T, D]", [&](auto view) {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = indexer_k_store(view, offv, coll, layer_idx, scale_mode, ctx);
    }
    throw_if_error(st);
  });
}

// --------------------------------------------------------------------- indexer
py::object indexer(py::handle q_obj, py::handle qs_obj, py::handle offs_obj, py::handle cache,
                   int64_t top_k, uint32_t layer_idx, const std::string& mask_name,
                   py::object out_obj, int num_threads, int64_t scores_budget_bytes,
                   const std::string& index_output) {
  py::array q = as_array(q_obj, "q");
  py::array qs = as_array(qs_obj, "q_s");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  auto qv = view_of<const float8_e4m3fn, 3>(q, "q", "[T, H, D]");
  auto qsv = view_of<const float, 2>(qs, "q_s", "[T, H]");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  MaskType mask;
  throw_if_error(parse_mask(mask_name, &mask));
  py::array out;
  if (!out_obj.is_none()) {
    out = as_array(out_obj, "out");
  } else {
    if (top_k < 1) throw py::value_error("top_k: expected >= 1, got " + std::to_string(top_k));
    out = new_array<int32_t>({qv.shape[0], top_k});
  }
  auto outv = view_of<int32_t, 2>(out, "output_indices", "[T, top_k]");
  if (outv.shape[1] != top_k) {
    throw py::value_error("out: expected shape [T, " + std::to_string(top_k) + "], got " +
                          format_shape(outv.shape.data(), 2));
  }
  const PagedKVCacheCollection coll = cache_collection(cache, "k_cache");
  const Context ctx = make_context(num_threads, scores_budget_bytes);
  const IndexerOptions options{parse_index_output(index_output), nullptr};
  Status st;
  {
    py::gil_scoped_release nogil;
    st = mla_indexer_ragged_float8_paged(outv, qv, qsv, offv, coll, layer_idx, mask, ctx, options);
  }
  throw_if_error(st);
  return out_obj.is_none() ? result_like(out, {q_obj, qs_obj}) : out_obj;
}

// --------------------------------------------------------------------- fused QKV
using TensorSf = std::variant<float, std::tuple<float, float, float>>;

PyPreparedQkv prepare(py::handle w_obj, py::handle ws_obj, const std::string& format_name,
                      int num_threads) {
  const BlockFormat format = parse_format(format_name);
  py::array w = as_array(w_obj, "weight");
  py::array ws = as_array(ws_obj, "weight_scale");
  auto wv = view_of<const uint8_t, 2>(w, "weight", "[N, row_bytes(K)]");
  auto wsv = view_of<const uint8_t, 5>(ws, "weight_scale", "[N/128, Kb/4, 32, 4, 4]");
  const Context ctx = make_context(num_threads);
  PyPreparedQkv out;
  Status st;
  {
    py::gil_scoped_release nogil;
    st = prepare_qkv_weights(wv, wsv, format, &out.weights, ctx);
  }
  throw_if_error(st);
  return out;
}

SectionScales section_scales(const TensorSf& tensor_sf) {
  if (const float* sf = std::get_if<float>(&tensor_sf)) return {*sf, *sf, *sf};
  const auto& [q, k, v] = std::get<std::tuple<float, float, float>>(tensor_sf);
  return {q, k, v};
}

py::object fused_qkv(py::handle hs_obj, py::handle offs_obj, py::handle w_obj, py::handle sa_obj,
                     py::handle sb_obj, py::handle cache, const TensorSf& tensor_sf,
                     uint32_t layer_idx, std::optional<std::string> format_name,
                     std::optional<int64_t> q_dim, py::object out_obj, int num_threads) {
  const bool prepared = py::isinstance<PyPreparedQkv>(w_obj);
  const PyPreparedQkv* pw = prepared ? &w_obj.cast<const PyPreparedQkv&>() : nullptr;
  const BlockFormat format = format_name ? parse_format(*format_name)
                                         : (prepared ? pw->weights.format : BlockFormat::kNVFP4);
  if (prepared && format != pw->weights.format) {
    throw py::value_error(std::string("format: the weights were prepared for ") +
                          block_format_name(pw->weights.format) + ", got " +
                          block_format_name(format));
  }
  if (prepared && !sb_obj.is_none()) {
    throw py::value_error(
        "weight_scale: expected None with prepared weights (they hold their scales)");
  }
  py::array hs = as_array(hs_obj, "hidden_state");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  py::array sa = as_array(sa_obj, "input_scale");
  auto hsv = view_of<const uint8_t, 2>(hs, "hidden_state", "[M, row_bytes(K)]");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  auto sav = view_of<const uint8_t, 5>(sa, "input_scale", "[M/128, Kb/4, 32, 4, 4]");
  py::array w, sb;
  TensorView<const uint8_t, 2> wv;
  TensorView<const uint8_t, 5> sbv;
  if (!prepared) {
    w = as_array(w_obj, "weight");
    sb = as_array(sb_obj, "weight_scale");
    wv = view_of<const uint8_t, 2>(w, "weight", "[N, row_bytes(K)]");
    sbv = view_of<const uint8_t, 5>(sb, "weight_scale", "[N/128, Kb/4, 32, 4, 4]");
  }
  const int64_t n = prepared ? pw->weights.n : wv.shape[0];
  const PagedKVCacheCollection coll = cache_collection(cache, "kv_cache");
  py::array out;
  if (!out_obj.is_none()) {
    out = as_array(out_obj, "out");
  } else {
    // q_dim defaults to the columns left after the cache's K (and V) sections.
    const int64_t width = coll.kv_dim * coll.num_heads * coll.head_size;
    const int64_t q = q_dim.value_or(n - width);
    if (q < 0) {
      throw py::value_error("weight: N = " + std::to_string(n) +
                            " is smaller than the cache's K/V width " + std::to_string(width));
    }
    out = new_array<bfloat16>({hsv.shape[0], q});
  }
  auto outv = view_of<bfloat16, 2>(out, "output", "[M, q_dim]");
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    if (prepared) {
      st = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
          hsv, offv, pw->weights, sav, section_scales(tensor_sf), coll, layer_idx, outv, ctx);
    } else if (const float* sf = std::get_if<float>(&tensor_sf)) {
      st = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
          hsv, offv, wv, sav, sbv, *sf, coll, layer_idx, outv, format, ctx);
    } else {
      st = generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4(
          hsv, offv, wv, sav, sbv, section_scales(tensor_sf), coll, layer_idx, outv, format, ctx);
    }
  }
  throw_if_error(st);
  return out_obj.is_none() ? result_like(out, {hs_obj, w_obj}, "bfloat16") : out_obj;
}

}  // namespace

ScaleMode parse_scale_mode(std::string name) {
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (name == "power_of_two" || name == "pow2" || name == "ue8m0") return ScaleMode::kPowerOfTwo;
  if (name == "float" || name == "fp32") return ScaleMode::kFloat;
  throw py::value_error("scale_mode: expected 'power_of_two' or 'float', got '" + name + "'");
}

void register_ops(py::module_& m) {
  m.def("quantize_dynamic_block_scaled", &quantize, py::arg("x"), py::arg("format") = "nvfp4",
        py::arg("global_scale") = 1.0f, py::kw_only(), py::arg("num_threads") = 0,
        R"doc(Block-scaled quantisation of activations (contract §5).

x: float32 or bfloat16 (or uint16 bits) [M, K]; K % SFV == 0 (SFV 16 for 'nvfp4',
32 for 'mxfp4' and 'mxfp8').
global_scale: NVFP4's global multiplier g = 448*6 / amax(x) (ignored by MX formats). The GEMM
later takes tensor_sf = 1 / (g_a * g_w), the inverse.
Returns (data, scales):
  data   uint8 [M, K/2] packed e2m1 (nvfp4, mxfp4) or uint8 [M, K] e4m3 (mxfp8)
  scales uint8 [ceil(M/128), ceil(K/SFV/4), 32, 4, 4] swizzled (e4m3 for nvfp4, else e8m0)
numpy arrays; for a torch x, torch tensors typed float4_e2m1fn_x2 / float8_e4m3fn (data) and
float8_e4m3fn / float8_e8m0fnu (scales).)doc");

  m.def("indexer_q_prepare", &q_prepare, py::arg("q"), py::arg("weights"),
        py::arg("scale_mode") = "power_of_two", py::kw_only(), py::arg("num_threads") = 0,
        R"doc(Quantises indexer queries per (token, head) (contract §5).

q: float32 [T, H, D]; weights: float32 [T, H].
scale_mode: 'power_of_two' (ue8m0 scales, DeepSeek-V3.2's default) or 'float' (amax / 448).
Returns (q_fp8 uint8 [T, H, D] e4m3 bits, q_s float32 [T, H] = w * H^-0.5 * D^-0.5 * scale).)doc");

  m.def("indexer_k_store", &k_store, py::arg("k"), py::arg("input_row_offsets"), py::arg("cache"),
        py::arg("layer_idx") = 0, py::arg("scale_mode") = "power_of_two", py::kw_only(),
        py::arg("num_threads") = 0,
        R"doc(Quantises new indexer keys per token into the cache (contract §5).

k: float32 or bfloat16 (or uint16 bits) [T, D]; input_row_offsets: integers [B + 1].
cache: PagedKVCache or PagedCacheView with dtype float8_e4m3fn, num_heads 1, head_size D and
scales (scale_granularity >= D). Row offs[b] + i goes to position cache_length(b) + i: the
fp8 bits into the cache's blocks, the float32 scale into its scales.)doc");

  m.def("mla_indexer_ragged_float8_paged", &indexer, py::arg("q"), py::arg("q_s"),
        py::arg("input_row_offsets"), py::arg("k_cache"), py::arg("top_k"),
        py::arg("layer_idx") = 0, py::arg("mask") = "causal", py::kw_only(),
        py::arg("out") = py::none(), py::arg("num_threads") = 0, py::arg("scores_budget_bytes") = 0,
        py::arg("index_output") = "positions",
        R"doc(DeepSeek-V3.2 lightning indexer (contract §3): the top_k key positions per new token.

q: float8_e4m3fn [T, H, D] (or uint8 bits); q_s: float32 [T, H]; input_row_offsets: integers
[B + 1]; k_cache: e4m3 PagedKVCache or PagedCacheView, 1 head of D, one scale per token;
mask: 'causal' or 'null'.
Returns int32 [T, top_k] (numpy, or torch for torch inputs; or fills `out`, any writable
int32 array or tensor): positions by score descending, ties by smaller position, then -1.
scores_budget_bytes 0 = the default 512 MiB workspace bound.
index_output: 'positions' or 'global_slots' (page id * page_size + slot of each selected key,
FlashMLA's sparse-attention indices; the -1 tail is kept).)doc");

  m.def("generic_fused_qkv_matmul_kv_cache_paged_ragged_scale_float4", &fused_qkv,
        py::arg("hidden_state"), py::arg("input_row_offsets"), py::arg("weight"),
        py::arg("input_scale"), py::arg("weight_scale"), py::arg("kv_cache"),
        py::arg("tensor_sf") = 1.0f, py::arg("layer_idx") = 0, py::arg("format") = py::none(),
        py::kw_only(), py::arg("q_dim") = py::none(), py::arg("out") = py::none(),
        py::arg("num_threads") = 0,
        R"doc(Fused block-scaled QKV projection into the paged cache (contract §4).

hidden_state: uint8 [M, K/2] packed e2m1 or float4_e2m1fn_x2 (uint8 [M, K] or float8_e4m3fn
for 'mxfp8');
input_row_offsets: integers [B + 1] with offs[B] == M;
weight: uint8 [N, K/2] (or [N, K]); row n holds output column n; or PreparedQkvWeights
(then weight_scale is None and format defaults to the prepared one);
input_scale: uint8 (or float8_e4m3fn / float8_e8m0fnu) swizzled [ceil(M/128), ceil(K/SFV/4), 32, 4, 4];
weight_scale: the same for N rows [ceil(N/128), ceil(K/SFV/4), 32, 4, 4];
kv_cache: PagedKVCache or PagedCacheView (kv_dim 2: N = q_dim + 2*H*D; kv_dim 1:
N = q_dim + H*D), no scales;
tensor_sf: the GEMM factor 1 / (g_a * g_w), or a (q, k, v) tuple of per-section factors.
format: 'nvfp4' (default), 'mxfp4' or 'mxfp8'.
Returns uint16 [M, q_dim] bfloat16 bits of the Q columns (decode_bf16 gives float32; a
torch.bfloat16 tensor for torch inputs), or fills `out` (uint16 or bfloat16, writable); the
K/V columns of row offs[b] + i go to position cache_length(b) + i.)doc");

  py::class_<PyPreparedQkv>(m, "PreparedQkvWeights",
                            "QKV weights repacked once for the CPU kernels (prepare_qkv_weights); "
                            "pass as `weight` to the fused projection with weight_scale=None.")
      .def_property_readonly("format",
                             [](const PyPreparedQkv& p) {
                               std::string name = block_format_name(p.weights.format);
                               for (char& c : name)
                                 c = char(std::tolower(static_cast<unsigned char>(c)));
                               return name;
                             })
      .def_property_readonly("n", [](const PyPreparedQkv& p) { return p.weights.n; })
      .def_property_readonly("k", [](const PyPreparedQkv& p) { return p.weights.k; });
  m.def("prepare_qkv_weights", &prepare, py::arg("weight"), py::arg("weight_scale"),
        py::arg("format") = "nvfp4", py::kw_only(), py::arg("num_threads") = 0,
        R"doc(Repacks a QKV weight once for repeated projections.

weight: uint8 [N, K/2] packed e2m1 (uint8 [N, K] e4m3 for 'mxfp8');
weight_scale: uint8 swizzled [ceil(N/128), ceil(K/SFV/4), 32, 4, 4].
Returns PreparedQkvWeights; the fused projection on it gives bit-identical results.)doc");
}

}  // namespace quantkv::python
