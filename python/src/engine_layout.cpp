// The indexer K cache in the engines' layout for Python (include/quantkv/engine_layout.hpp):
// a uint8 array as vLLM ([num_blocks, page_size * (D + 4)] or [num_blocks, page_size, D + 4])
// or DeepGEMM ([num_blocks, page_size, 1, D + 4]) allocate it, read and written in place, with
// an int32 or uint32 block table; the indexer's global-slot output.
#include "quantkv/engine_layout.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <optional>
#include <string>

#include "arrays.hpp"
#include "quantkv/indexer.hpp"

namespace quantkv::python {
namespace {

// D from the bytes of one token (its key row and scale row): D + 4 (fp8), D/2 + D/32 = 17 D / 32
// (mxfp4) or D/2 + D/16 = 9 D / 16 (nvfp4).
int64_t head_size_from_width(int64_t width, IndexKFormat format) {
  if (format == IndexKFormat::kNvfp4) {
    if (width <= 0 || width % 9 != 0) {
      throw py::value_error(
          "kv_cache: expected D/2 + D/16 bytes per token (a multiple of 9) for k_format "
          "'nvfp4', got " +
          std::to_string(width));
    }
    return width / 9 * 16;
  }
  if (format == IndexKFormat::kMxfp4) {
    if (width <= 0 || width % 17 != 0) {
      throw py::value_error(
          "kv_cache: expected D/2 + D/32 bytes per token (a multiple of 17) "
          "for k_format 'mxfp4', got " +
          std::to_string(width));
    }
    return width / 17 * 32;
  }
  return width - 4;
}

}  // namespace

IndexKFormat parse_index_k_format(std::string name) {
  for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (name == "fp8") return IndexKFormat::kFp8;
  if (name == "mxfp4") return IndexKFormat::kMxfp4;
  if (name == "nvfp4") return IndexKFormat::kNvfp4;
  throw py::value_error("k_format: expected 'fp8', 'mxfp4' or 'nvfp4', got '" + name + "'");
}

// The byte buffer's geometry from its shape: rank 2 needs page_size; ranks 3 and 4 carry it in
// dimension 1 and the bytes of one token (D + 4, or D/2 + D/32 for mxfp4) in the last. Inside
// a page the bytes must be contiguous; pages may be padded (dimension 0's stride is the page
// stride).
EngineArrays engine_arrays(py::handle kv_obj, py::handle table_obj, py::handle lengths_obj,
                           std::optional<int64_t> page_size, bool writable, IndexKFormat format,
                           float global_scale) {
  EngineArrays e;
  e.cache.format = format;
  e.cache.global_scale = global_scale;
  e.data = as_array(kv_obj, "kv_cache");
  if (!has_dtype<uint8_t>(e.data)) detail::throw_dtype(e.data, "kv_cache", "uint8");
  const int rank = int(e.data.ndim());
  if (rank < 2 || rank > 4) {
    throw py::value_error(
        "kv_cache: expected uint8 [num_blocks, page_size * (D + 4)], [num_blocks, page_size, D + "
        "4] "
        "or [num_blocks, page_size, 1, D + 4], got rank " +
        std::to_string(rank));
  }
  if (writable && !e.data.writeable()) throw py::value_error("kv_cache: expected a writable array");
  int64_t inner = 1;
  for (int d = rank - 1; d >= 1; --d) {
    if (e.data.shape(d) > 1 && e.data.strides(d) != inner) {
      throw py::value_error("kv_cache: expected the bytes of a page to be contiguous (dimension " +
                            std::to_string(d) + " has stride " + std::to_string(e.data.strides(d)) +
                            ")");
    }
    inner *= e.data.shape(d);
  }
  EngineIndexerKCache& c = e.cache;
  c.num_blocks = e.data.shape(0);
  if (rank == 2) {
    if (!page_size)
      throw py::value_error(
          "page_size: required for a 2-D kv_cache [num_blocks, page_size * (D + 4)]");
    c.page_size = *page_size;
    c.head_size = c.page_size > 0 ? head_size_from_width(e.data.shape(1) / c.page_size, format) : 0;
    if (c.page_size > 0 && e.data.shape(1) % c.page_size != 0) {
      throw py::value_error("kv_cache: expected page_size * (D + 4) bytes per page, got " +
                            std::to_string(e.data.shape(1)) + " for page_size " +
                            std::to_string(c.page_size));
    }
  } else {
    c.page_size = e.data.shape(1);
    c.head_size = head_size_from_width(e.data.shape(rank - 1), format);
    if (rank == 4 && e.data.shape(2) != 1)
      throw py::value_error("kv_cache: expected one head in dimension 2");
    if (page_size && *page_size != c.page_size) {
      throw py::value_error("page_size: " + std::to_string(*page_size) +
                            " disagrees with kv_cache.shape[1] = " + std::to_string(c.page_size));
    }
  }
  if (c.num_blocks > 1 && e.data.strides(0) <= 0) {  // broadcast or reversed pages would alias
    throw py::value_error("kv_cache: expected a positive page stride, got " +
                          std::to_string(e.data.strides(0)));
  }
  c.page_stride_bytes = c.num_blocks > 1 ? e.data.strides(0) : 0;
  c.data = static_cast<uint8_t*>(const_cast<void*>(e.data.data()));
  e.table = as_array(table_obj, "block_table");
  if (has_dtype<int32_t>(e.table)) {
    c.lookup_table =
        as_uint32_view(view_of<const int32_t, 2>(e.table, "block_table", "[B, max_pages_per_seq]"));
  } else {
    c.lookup_table = view_of<const uint32_t, 2>(e.table, "block_table", "[B, max_pages_per_seq]");
  }
  e.lengths = as_offsets(lengths_obj, "cache_lengths");
  c.cache_lengths = view_of<const uint32_t, 1>(e.lengths, "cache_lengths", "[B]");
  return e;
}

namespace {

void k_store_engine(py::handle k_obj, py::handle offs_obj, py::handle kv_obj, py::handle table_obj,
                    py::handle lengths_obj, const std::string& mode,
                    std::optional<int64_t> page_size, int num_threads, const std::string& k_format,
                    float k_global_scale) {
  py::array k = as_array(k_obj, "k");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  const EngineArrays e = engine_arrays(kv_obj, table_obj, lengths_obj, page_size, /*writable=*/true,
                                       parse_index_k_format(k_format), k_global_scale);
  const ScaleMode scale_mode = parse_scale_mode(mode);
  const Context ctx = make_context(num_threads);
  Status st;
  if (has_dtype<float>(k)) {
    auto kv = view_of<const float, 2>(k, "k", "[T, D]");
    py::gil_scoped_release nogil;
    st = indexer_k_store(kv, offv, e.cache, scale_mode, ctx);
  } else if (has_dtype<bfloat16>(k)) {
    auto kv = view_of<const bfloat16, 2>(k, "k", "[T, D]");
    py::gil_scoped_release nogil;
    st = indexer_k_store(kv, offv, e.cache, scale_mode, ctx);
  } else {
    detail::throw_dtype(k, "k", "float32 or uint16 (bfloat16 bits)");
  }
  throw_if_error(st);
}

py::object indexer_engine(py::handle q_obj, py::handle qs_obj, py::handle offs_obj,
                          py::handle kv_obj, py::handle table_obj, py::handle lengths_obj,
                          int64_t top_k, const std::string& mask_name,
                          const std::string& index_output, std::optional<int64_t> page_size,
                          int num_threads, int64_t scores_budget_bytes, const std::string& k_format,
                          float k_global_scale) {
  py::array q = as_array(q_obj, "q");
  py::array qs = as_array(qs_obj, "q_s");
  py::array offs = as_offsets(offs_obj, "input_row_offsets");
  auto qv = view_of<const float8_e4m3fn, 3>(q, "q", "[T, H, D]");
  auto qsv = view_of<const float, 2>(qs, "q_s", "[T, H]");
  auto offv = view_of<const uint32_t, 1>(offs, "input_row_offsets", "[B + 1]");
  const EngineArrays e = engine_arrays(kv_obj, table_obj, lengths_obj, page_size,
                                       /*writable=*/false, parse_index_k_format(k_format));
  MaskType mask;
  throw_if_error(parse_mask(mask_name, &mask));
  const IndexerOptions options{parse_index_output(index_output), nullptr};
  if (top_k < 1) throw py::value_error("top_k: expected >= 1, got " + std::to_string(top_k));
  py::array out = new_array<int32_t>({qv.shape[0], top_k});
  auto outv = view_of<int32_t, 2>(out, "output_indices", "[T, top_k]");
  const Context ctx = make_context(num_threads, scores_budget_bytes);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = mla_indexer_ragged_float8_paged(outv, qv, qsv, offv, e.cache, mask, ctx, options);
  }
  throw_if_error(st);
  // In the caller's framework (a torch tensor for torch inputs), as every other operation.
  return result_like(out, {q_obj, kv_obj});
}

}  // namespace

IndexOutput parse_index_output(std::string name) {
  for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (name == "positions") return IndexOutput::kPositions;
  if (name == "global_slots") return IndexOutput::kGlobalSlots;
  throw py::value_error("index_output: expected 'positions' or 'global_slots', got '" + name + "'");
}

void register_engine_layout(py::module_& m) {
  m.def("indexer_k_store_engine", &k_store_engine, py::arg("k"), py::arg("input_row_offsets"),
        py::arg("kv_cache"), py::arg("block_table"), py::arg("cache_lengths"), py::kw_only(),
        py::arg("scale_mode") = "power_of_two", py::arg("page_size") = py::none(),
        py::arg("num_threads") = 0, py::arg("k_format") = "fp8", py::arg("k_global_scale") = 1.0f,
        R"doc(The indexer K store into one layer's K cache in the engines' layout, in place.

kv_cache: uint8, each page = page_size e4m3 key rows of D bytes, then page_size float32 scales
(vLLM's indexer_k_quant_and_cache, SGLang's NSA index-K buffer, DeepGEMM's
fp8_paged_mqa_logits): [num_blocks, page_size * (D + 4)] (give page_size),
[num_blocks, page_size, D + 4] or [num_blocks, page_size, 1, D + 4]; pages may be padded.
k_format='mxfp4': DeepSeek-V4's MXFP4 cache instead, each page = page_size rows of D/2 e2m1
bytes, then page_size rows of D/32 ue8m0 bytes ([num_blocks, page_size, D/2 + D/32], ...;
scale_mode must be 'power_of_two'); written with vLLM's rounding, bit for bit.
k_format='nvfp4': D/2 e2m1 bytes, then D/16 e4m3 bytes per token ([..., D/2 + D/16]), with the
per-tensor k_global_scale g (sf = e4m3(g * amax / 6), value = code * sf / g).
block_table: int32 (negative = no page) or uint32 [B, max_pages_per_seq]; cache_lengths [B].
k: float32 or uint16 (bfloat16 bits) [T, D]. Bit-identical to indexer_k_store on a PagedKVCache.)doc");

  m.def("mla_indexer_ragged_float8_paged_engine", &indexer_engine, py::arg("q"), py::arg("q_s"),
        py::arg("input_row_offsets"), py::arg("kv_cache"), py::arg("block_table"),
        py::arg("cache_lengths"), py::arg("top_k"), py::kw_only(), py::arg("mask") = "causal",
        py::arg("index_output") = "positions", py::arg("page_size") = py::none(),
        py::arg("num_threads") = 0, py::arg("scores_budget_bytes") = 0, py::arg("k_format") = "fp8",
        py::arg("k_global_scale") = 1.0f,
        R"doc(The lightning indexer over a K cache in the engines' layout, read in place.

Arguments as indexer_k_store_engine plus q uint8 [T, H, D] (e4m3 bits), q_s float32 [T, H],
top_k, mask ('causal' or 'null'). index_output: 'positions' (per-sequence positions, as
mla_indexer_ragged_float8_paged) or 'global_slots' (page id * page_size + slot, FlashMLA's
sparse-attention indices). Returns int32 [T, top_k], -1 after the min(top_k, visible keys) best.)doc");
}

}  // namespace quantkv::python
