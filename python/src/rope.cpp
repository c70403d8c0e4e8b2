// Python bindings of RoPE over the paged cache (fused_qk_rope_ragged) and of the indexer front
// end (RoPE + Walsh-Hadamard before the K store / Q prepare quantisation).
#include "quantkv/rope.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <optional>
#include <string>
#include <type_traits>

#include "arrays.hpp"
#include "cache.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::python {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Keeps the arrays a RopeOptions points into alive for the call.
struct RopeArgs {
  py::array freqs, positions;
  RopeOptions options;
};

RopeArgs rope_args(py::handle freqs_obj, py::handle positions_obj, const std::string& layout,
                   const std::string& placement) {
  RopeArgs a;
  a.freqs = as_array(freqs_obj, "freqs_cis");
  a.options.freqs_cis = view_of<const float, 2>(a.freqs, "freqs_cis", "[max_seq_len, rope_dim]");
  if (!positions_obj.is_none()) {
    a.positions = as_offsets(positions_obj, "position_ids");
    a.options.position_ids = view_of<const uint32_t, 1>(a.positions, "position_ids", "[T]");
  }
  const std::string l = lower(layout), p = lower(placement);
  if (l == "interleaved")
    a.options.layout = RopeLayout::kInterleaved;
  else if (l == "half_split" || l == "neox")
    a.options.layout = RopeLayout::kHalfSplit;
  else
    throw py::value_error("rope_layout: expected 'interleaved' or 'half_split', got '" + layout +
                          "'");
  if (p == "trailing")
    a.options.placement = RopePlacement::kTrailing;
  else if (p == "leading")
    a.options.placement = RopePlacement::kLeading;
  else
    throw py::value_error("rope_placement: expected 'trailing' or 'leading', got '" + placement +
                          "'");
  return a;
}

ScaleMode scale_mode_of(const std::string& name) {
  const std::string n = lower(name);
  if (n == "power_of_two" || n == "pow2" || n == "ue8m0") return ScaleMode::kPowerOfTwo;
  if (n == "float" || n == "fp32") return ScaleMode::kFloat;
  throw py::value_error("scale_mode: expected 'power_of_two' or 'float', got '" + name + "'");
}

// The front end of the keyword arguments (RoPE when freqs_cis is given).
struct FrontEndArgs {
  RopeArgs rope;
  IndexerFrontEnd fe;
};
FrontEndArgs front_end_args(py::handle freqs, py::handle positions, const std::string& layout,
                            const std::string& placement, bool hadamard,
                            const std::string& rounding) {
  FrontEndArgs a;
  if (!freqs.is_none()) {
    a.rope = rope_args(freqs, positions, layout, placement);
    a.fe.apply_rope = true;
    a.fe.rope = a.rope.options;
  }
  a.fe.hadamard = hadamard ? HadamardMode::kWalshHadamard : HadamardMode::kNone;
  const std::string r = lower(rounding);
  if (r == "bf16")
    a.fe.rounding = FrontEndRounding::kBf16Steps;
  else if (r == "fp32" || r == "float32")
    a.fe.rounding = FrontEndRounding::kFloat32;
  else
    throw py::value_error("rounding: expected 'bf16' or 'fp32', got '" + rounding + "'");
  return a;
}

template <int Rank, typename Fn>
void float_or_bf16(const py::array& x, const char* name, const char* dims, Fn&& fn) {
  if (has_dtype<float>(x))
    fn(view_of<const float, Rank>(x, name, dims));
  else if (has_dtype<bfloat16>(x))
    fn(view_of<const bfloat16, Rank>(x, name, dims));
  else
    detail::throw_dtype(x, name, "float32 or uint16 (bfloat16 bits)");
}

template <typename Fn>
void without_gil(Fn&& fn) {
  Status st;
  {
    py::gil_scoped_release nogil;
    st = fn();
  }
  throw_if_error(st);
}

py::array rope_ragged(py::handle q_obj, py::handle offs_obj, py::handle cache, py::handle freqs,
                      uint32_t layer_idx, py::handle positions, const std::string& layout,
                      const std::string& placement, int num_threads) {
  py::array q = as_array(q_obj, "q_proj");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  const auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  const RopeArgs args = rope_args(freqs, positions, layout, placement);
  const PagedKVCacheCollection coll = cache_collection(cache, "kv_cache");
  const Context ctx = make_context(num_threads);
  py::array out;
  float_or_bf16<3>(q, "q_proj", "[T, Hq, D]", [&](auto view) {
    using Elem = std::remove_const_t<typename decltype(view)::element_type>;
    out = new_array<Elem>({view.shape[0], view.shape[1], view.shape[2]});
    auto outv = view_of<Elem, 3>(out, "output", "[T, Hq, D]");
    without_gil(
        [&] { return fused_qk_rope_ragged(view, offv, coll, args.options, layer_idx, outv, ctx); });
  });
  return out;
}

// `cache` is a PagedKVCache / PagedCacheView (MAX's collection, layer layer_idx) or, with
// block_table and cache_lengths, one layer's uint8 K cache in the engines' layout.
void k_store_front_end(py::handle k_obj, py::handle offs_obj, py::handle cache, uint32_t layer_idx,
                       const std::string& mode, py::handle freqs, py::handle positions,
                       const std::string& layout, const std::string& placement, bool hadamard,
                       const std::string& rounding, py::handle block_table,
                       py::handle cache_lengths, std::optional<int64_t> page_size,
                       int num_threads) {
  py::array k = as_array(k_obj, "k");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  const FrontEndArgs fa = front_end_args(freqs, positions, layout, placement, hadamard, rounding);
  IndexerKStoreArgs args;
  args.input_row_offsets = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  args.scale_mode = scale_mode_of(mode);
  args.front_end = &fa.fe;
  if (block_table.is_none() != cache_lengths.is_none()) {
    throw py::value_error(
        "block_table, cache_lengths: give both (an engine-layout cache) or neither (a "
        "PagedKVCache)");
  }
  PagedKVCacheCollection coll;
  EngineArrays engine;
  if (block_table.is_none()) {
    coll = cache_collection(cache, "cache");
    args.k_collection = &coll;
    args.layer_idx = layer_idx;
  } else {
    engine = engine_arrays(cache, block_table, cache_lengths, page_size, /*writable=*/true);
    args.k_cache = &engine.cache;
  }
  const Context ctx = make_context(num_threads);
  float_or_bf16<2>(k, "k", "[T, D]", [&](auto view) {
    if constexpr (std::is_same_v<typename decltype(view)::element_type, const bfloat16>) {
      args.k_bf16 = view;
    } else {
      args.k = view;
    }
    without_gil([&] { return indexer_k_store(args, ctx); });
  });
}

py::tuple q_prepare_front_end(py::handle q_obj, py::handle w_obj, const std::string& mode,
                              py::handle freqs, py::handle positions, const std::string& layout,
                              const std::string& placement, bool hadamard,
                              const std::string& rounding, int num_threads) {
  py::array q = as_array(q_obj, "q");
  py::array w = as_array(w_obj, "weights");
  const auto wv = view_of<const float, 2>(w, "weights", "[T, H]");
  const FrontEndArgs fa = front_end_args(freqs, positions, layout, placement, hadamard, rounding);
  const ScaleMode scale_mode = scale_mode_of(mode);
  const Context ctx = make_context(num_threads);
  py::array q8, qs;
  float_or_bf16<3>(q, "q", "[T, H, D]", [&](auto view) {
    q8 = new_array<uint8_t>({view.shape[0], view.shape[1], view.shape[2]});
    qs = new_array<float>({view.shape[0], view.shape[1]});
    auto q8v = view_of<float8_e4m3fn, 3>(q8, "q_fp8", "[T, H, D]");
    auto qsv = view_of<float, 2>(qs, "q_s", "[T, H]");
    without_gil([&] { return indexer_q_prepare(view, wv, q8v, qsv, scale_mode, fa.fe, ctx); });
  });
  return py::make_tuple(q8, qs);
}

py::array freqs_cis(int64_t max_seq_len, int64_t rope_dim, double theta) {
  if (max_seq_len < 0)
    throw py::value_error("max_seq_len: expected >= 0, got " + std::to_string(max_seq_len));
  py::array out = new_array<float>({max_seq_len, rope_dim});
  throw_if_error(
      make_freqs_cis(view_of<float, 2>(out, "freqs_cis", "[max_seq_len, rope_dim]"), theta));
  return out;
}

}  // namespace

void register_rope(py::module_& m) {
  m.def("make_freqs_cis", &freqs_cis, py::arg("max_seq_len"), py::arg("rope_dim"),
        py::arg("theta") = 10000.0,
        "float32 [max_seq_len, rope_dim]: (cos, sin) of p * theta^(-2i / rope_dim) at columns 2i, "
        "2i + 1.");
  m.def(
      "fused_qk_rope_ragged", &rope_ragged, py::arg("q_proj"), py::arg("input_row_offsets"),
      py::arg("kv_cache"), py::arg("freqs_cis"), py::arg("layer_idx") = 0, py::kw_only(),
      py::arg("position_ids") = py::none(), py::arg("rope_layout") = "interleaved",
      py::arg("rope_placement") = "trailing", py::arg("num_threads") = 0,
      R"doc(MAX's fused_qk_rope_ragged: returns q_proj with the rope part of every head rotated and
rotates the rope part of K (kv index 0, every head) at position cache_length(b) + i in place.

q_proj: float32 or uint16 (bfloat16 bits) [T, Hq, D]; freqs_cis: float32 [max_seq_len, rope_dim];
position_ids: integers [T] for the angles (default: the cache positions);
rope_layout: 'interleaved' or 'half_split'; rope_placement: 'trailing' (MAX) or 'leading'.)doc");
  m.def("indexer_k_store_front_end", &k_store_front_end, py::arg("k"), py::arg("input_row_offsets"),
        py::arg("cache"), py::arg("layer_idx") = 0, py::arg("scale_mode") = "power_of_two",
        py::kw_only(), py::arg("freqs_cis") = py::none(), py::arg("position_ids") = py::none(),
        py::arg("rope_layout") = "half_split", py::arg("rope_placement") = "leading",
        py::arg("hadamard") = true, py::arg("rounding") = "bf16",
        py::arg("block_table") = py::none(), py::arg("cache_lengths") = py::none(),
        py::arg("page_size") = py::none(), py::arg("num_threads") = 0,
        R"doc(indexer_k_store after DeepSeek-V3.2's front end: RoPE (when freqs_cis is given) on the
leading/trailing rope_dim elements, the Walsh-Hadamard rotation (hadamard=True; D a power of two),
each step rounded to bf16 (rounding='bf16', the reference) or not ('fp32').

cache: a PagedKVCache / PagedCacheView (layer layer_idx), or, with block_table and
cache_lengths (and page_size for a 2-D buffer), one layer's uint8 K cache in the engines' layout
as indexer_k_store_engine takes it, written in place (layer_idx is then unused).)doc");
  m.def("indexer_q_prepare_front_end", &q_prepare_front_end, py::arg("q"), py::arg("weights"),
        py::arg("scale_mode") = "power_of_two", py::kw_only(), py::arg("freqs_cis") = py::none(),
        py::arg("position_ids") = py::none(), py::arg("rope_layout") = "half_split",
        py::arg("rope_placement") = "leading", py::arg("hadamard") = true,
        py::arg("rounding") = "bf16", py::arg("num_threads") = 0,
        R"doc(indexer_q_prepare after the front end (q float32 or uint16 bfloat16 bits [T, H, D]);
RoPE needs position_ids [T]. Returns (q_fp8 uint8 [T, H, D], q_s float32 [T, H]).)doc");
}

}  // namespace quantkv::python
