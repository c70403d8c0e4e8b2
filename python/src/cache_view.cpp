// PagedCacheView for Python: a paged cache over arrays the caller owns (an inference engine's
// KV blocks and block table), accepted by every operation that takes a cache. Nothing is
// copied: the operations read the caller's page table and lengths at call time and write K/V
// into the caller's blocks.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "arrays.hpp"
#include "cache.hpp"

namespace quantkv::python {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The cache dtype of `blocks`: float32, bf16 (uint16 bits or a bfloat16 dtype), float16, e4m3
// (uint8 bits or a float8_e4m3fn dtype).
DType cache_dtype(const py::array& blocks) {
  if (has_dtype<float>(blocks)) return DType::kF32;
  if (has_dtype<bfloat16>(blocks)) return DType::kBF16;
  if (has_dtype<float16>(blocks)) return DType::kF16;
  if (has_dtype<float8_e4m3fn>(blocks)) return DType::kE4M3;
  detail::throw_dtype(
      blocks, "blocks",
      "float32, bfloat16 (or uint16 bits), float16 or float8_e4m3fn (or uint8 bits)");
}

void require_contiguous(const py::array& a, const char* name) {
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) +
                          ": expected a C-contiguous array (the cache layout "
                          "is row-major with no padding)");
  }
}

// cache_lengths / lookup_table: uint32, or int32 taken as its bits (engines keep int32 tables;
// the library rejects lengths and pages out of range, so a negative value is an error there).
template <int Rank>
TensorView<const uint32_t, Rank> index_view(const py::array& a, const char* name,
                                            const char* dims) {
  if (has_dtype<int32_t>(a)) {
    py::array bits = a.attr("view")("u4");
    return view_of<const uint32_t, Rank>(bits, name, dims);
  }
  return view_of<const uint32_t, Rank>(a, name, dims);
}

// scale_granularity from the scales' last extent when it divides head_size exactly.
int64_t infer_granularity(int64_t head_size, int64_t scale_cols) {
  if (scale_cols > 0 && head_size % scale_cols == 0) return head_size / scale_cols;
  throw py::value_error("scale_granularity: cannot infer it from head_size " + str(head_size) +
                        " and " + str(scale_cols) + " scale columns; pass it");
}

PyCacheView make_view(py::object blocks_obj, py::object lengths_obj, py::object table_obj,
                      py::object scales_obj, std::optional<int64_t> scale_granularity) {
  PyCacheView out;
  out.blocks = blocks_obj;
  out.cache_lengths = lengths_obj;
  out.lookup_table = table_obj;
  out.scales = scales_obj;
  py::array blocks = as_array(blocks_obj, "blocks");
  py::array lengths = as_array(lengths_obj, "cache_lengths");
  py::array table = as_array(table_obj, "lookup_table");
  for (const py::array& a : {blocks, lengths, table}) out.imported.append(a);
  const char* kBlockDims = "[num_blocks, kv_dim, num_layers, page_size, num_heads, head_size]";
  detail::check_layout(blocks, "blocks", kBlockDims, 6, true);
  require_contiguous(blocks, "blocks");
  PagedKVCacheCollection& v = out.view;
  v.dtype = cache_dtype(blocks);
  v.blocks = const_cast<void*>(blocks.data());
  v.num_blocks = blocks.shape(0);
  v.kv_dim = blocks.shape(1);
  v.num_layers = blocks.shape(2);
  v.page_size = blocks.shape(3);
  v.num_heads = blocks.shape(4);
  v.head_size = blocks.shape(5);
  v.cache_lengths = index_view<1>(lengths, "cache_lengths", "[B]");
  v.lookup_table = index_view<2>(table, "lookup_table", "[B, max_pages_per_seq]");
  if (!scales_obj.is_none()) {
    py::array scales = as_array(scales_obj, "scales");
    out.imported.append(scales);
    auto s = view_of<float, 6>(
        scales, "scales", "[num_blocks, kv_dim, num_layers, page_size, num_heads, scale_cols]");
    require_contiguous(scales, "scales");
    for (int d = 0; d < 5; ++d) {
      if (s.shape[d] != blocks.shape(d)) {
        throw py::value_error("scales: expected the first five extents of blocks " +
                              format_shape(s.shape.data(), 5) + " to match, dimension " + str(d) +
                              " is " + str(s.shape[d]) + " vs " + str(blocks.shape(d)));
      }
    }
    v.scales = s.data;
    v.scale_granularity = scale_granularity.value_or(infer_granularity(v.head_size, s.shape[5]));
    if (v.scale_cols() != s.shape[5]) {
      throw py::value_error("scales: expected " + str(v.scale_cols()) +
                            " scale columns for head_size " + str(v.head_size) +
                            " and scale_granularity " + str(v.scale_granularity) + ", got " +
                            str(s.shape[5]));
    }
  } else if (scale_granularity.value_or(0) != 0) {
    throw py::value_error("scale_granularity: given without scales");
  }
  throw_if_error(validate_paged_kv(v, "cache"));
  return out;
}

const char* kViewDoc = R"doc(A paged cache over arrays the caller owns (an engine's KV cache).

PagedCacheView(blocks, cache_lengths, lookup_table, scales=None, *, scale_granularity=None)

  blocks         [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size], C-contiguous:
                 float32 | bfloat16 (torch.bfloat16, ml_dtypes.bfloat16 or uint16 bits) |
                 float16 | float8_e4m3fn (torch / ml_dtypes, or uint8 bits)
  cache_lengths  uint32 or int32 [B]: tokens already cached per sequence
  lookup_table   uint32 or int32 [B, max_pages_per_seq]: page ids (>= num_blocks: no page)
  scales         float32 [num_blocks, kv_dim, num_layers, page_size, num_heads, scale_cols],
                 C-contiguous, or None; scale_granularity defaults to head_size / scale_cols

numpy arrays, ml_dtypes arrays or torch CPU tensors (any __dlpack__ object), taken without a
copy: the operations read the caller's page table and lengths when they run and write K/V
(and scales) into the caller's blocks. The view keeps the arrays alive; replacing a tensor in
the engine (rather than updating it in place) needs a new view. The operations do not advance
cache_lengths: the engine does, as with PagedKVCache.set_cache_length.)doc";

}  // namespace

PagedKVCacheCollection cache_collection(py::handle obj, const char* name) {
  if (py::isinstance<PyPagedKVCache>(obj)) return obj.cast<PyPagedKVCache&>().cache.view();
  if (py::isinstance<PyCacheView>(obj)) return obj.cast<const PyCacheView&>().view;
  throw py::type_error(std::string(name) + ": expected a PagedKVCache or a PagedCacheView, got " +
                       py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
}

void register_cache_view(py::module_& m) {
  py::class_<PyCacheView>(m, "PagedCacheView", kViewDoc)
      .def(py::init(&make_view), py::arg("blocks"), py::arg("cache_lengths"),
           py::arg("lookup_table"), py::arg("scales") = py::none(), py::kw_only(),
           py::arg("scale_granularity") = py::none())
      .def_readonly("blocks", &PyCacheView::blocks, "The blocks object as passed.")
      .def_readonly("cache_lengths", &PyCacheView::cache_lengths,
                    "The cache_lengths object as passed.")
      .def_readonly("lookup_table", &PyCacheView::lookup_table,
                    "The lookup_table object as passed.")
      .def_readonly("scales", &PyCacheView::scales, "The scales object as passed, or None.")
      .def_property_readonly("dtype", [](const PyCacheView& s) { return dtype_name(s.view.dtype); })
      .def_property_readonly("num_blocks", [](const PyCacheView& s) { return s.view.num_blocks; })
      .def_property_readonly("kv_dim", [](const PyCacheView& s) { return s.view.kv_dim; })
      .def_property_readonly("num_layers", [](const PyCacheView& s) { return s.view.num_layers; })
      .def_property_readonly("page_size", [](const PyCacheView& s) { return s.view.page_size; })
      .def_property_readonly("num_heads", [](const PyCacheView& s) { return s.view.num_heads; })
      .def_property_readonly("head_size", [](const PyCacheView& s) { return s.view.head_size; })
      .def_property_readonly("scale_granularity",
                             [](const PyCacheView& s) { return s.view.scale_granularity; })
      .def_property_readonly("batch_size", [](const PyCacheView& s) { return s.view.batch_size(); })
      .def_property_readonly("max_pages_per_seq",
                             [](const PyCacheView& s) { return s.view.max_pages_per_seq(); })
      .def("__repr__", [](const PyCacheView& s) {
        const PagedKVCacheCollection& v = s.view;
        return "PagedCacheView(dtype='" + std::string(dtype_name(v.dtype)) +
               "', num_blocks=" + str(v.num_blocks) + ", kv_dim=" + str(v.kv_dim) +
               ", num_layers=" + str(v.num_layers) + ", page_size=" + str(v.page_size) +
               ", num_heads=" + str(v.num_heads) + ", head_size=" + str(v.head_size) +
               ", batch_size=" + str(v.batch_size()) + ")";
      });
}

}  // namespace quantkv::python
