// PagedKVCache for Python: creation, page assignment, cache lengths, numpy views of the
// storage, and read/write helpers by (sequence, position) that follow the lookup table.
#include "cache.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>

#include "arrays.hpp"

namespace quantkv::python {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

DType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "f32") return DType::kF32;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float16" || name == "fp16" || name == "f16") return DType::kF16;
  if (name == "float8_e4m3fn" || name == "e4m3" || name == "fp8") return DType::kE4M3;
  throw py::value_error(
      "dtype: expected 'float32', 'bfloat16', 'float16' or 'float8_e4m3fn', got '" + name + "'");
}

// The numpy dtype of the storage: bf16 as uint16 bits, e4m3 as uint8 bits.
py::dtype storage_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return py::dtype("float32");
    case DType::kBF16:
      return py::dtype("uint16");
    case DType::kF16:
      return py::dtype("float16");
    case DType::kE4M3:
      return py::dtype("uint8");
  }
  return py::dtype("uint8");
}

// A zero-copy array over the cache's memory, kept alive by the Python cache object.
py::array numpy_view(py::handle owner, py::dtype dtype, std::vector<py::ssize_t> shape, void* data,
                     bool writable) {
  py::array a(dtype, std::move(shape), {}, data, owner);
  if (!writable) a.attr("flags").attr("writeable") = false;
  return a;
}

void check_index(const char* name, int64_t v, int64_t n) {
  if (v < 0 || v >= n) {
    throw py::value_error(std::string(name) + ": expected 0 <= " + name + " < " + str(n) +
                          ", got " + str(v));
  }
}

struct Span {
  int64_t start, stop;
  int64_t size() const { return stop - start; }
};

// Validates (b, kv, layer) and the position range [start, stop) against the reserved pages.
Span check_span(const PagedKVCache& c, int64_t b, int64_t kv, int64_t layer, int64_t start,
                std::optional<int64_t> stop) {
  const PagedKVCacheConfig& cfg = c.config();
  check_index("b", b, cfg.batch_size);
  check_index("kv", kv, cfg.kv_dim);
  check_index("layer", layer, cfg.num_layers);
  const int64_t reserved = c.pages_used(b) * cfg.page_size;
  const int64_t end = stop.value_or(reserved);
  if (start < 0 || end < start || end > reserved) {
    throw py::value_error("positions: expected 0 <= start <= stop <= " + str(reserved) +
                          " (reserved positions of sequence " + str(b) + "), got [" + str(start) +
                          ", " + str(end) + ")");
  }
  return {start, end};
}

// Byte offset of (b, pos, kv, layer) rows: the [num_heads, row_elems] block of one slot.
int64_t slot_row(const PagedKVCacheCollection& v, int64_t b, int64_t pos, int64_t kv,
                 int64_t layer) {
  const int64_t page = v.page_of(b, pos);
  return ((page * v.kv_dim + kv) * v.num_layers + layer) * v.page_size + pos % v.page_size;
}

py::array read_raw(PyPagedKVCache& self, int64_t b, int64_t kv, int64_t layer, int64_t start,
                   std::optional<int64_t> stop) {
  const Span s = check_span(self.cache, b, kv, layer, start, stop);
  const PagedKVCacheCollection v = self.cache.view();
  const std::size_t slot_bytes = std::size_t(v.num_heads * v.head_size) * dtype_size(v.dtype);
  py::array out(storage_dtype(v.dtype),
                std::vector<py::ssize_t>{s.size(), v.num_heads, v.head_size});
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  const auto* src = static_cast<const uint8_t*>(v.blocks);
  for (int64_t p = s.start; p < s.stop; ++p) {
    std::memcpy(dst + (p - s.start) * slot_bytes, src + slot_row(v, b, p, kv, layer) * slot_bytes,
                slot_bytes);
  }
  return out;
}

py::array read_decoded(PyPagedKVCache& self, int64_t b, int64_t kv, int64_t layer, int64_t start,
                       std::optional<int64_t> stop) {
  const Span s = check_span(self.cache, b, kv, layer, start, stop);
  const PagedKVCacheCollection v = self.cache.view();
  const int64_t n = v.num_heads * v.head_size;
  py::array out = new_array<float>({s.size(), v.num_heads, v.head_size});
  auto* dst = static_cast<float*>(out.mutable_data());
  for (int64_t p = s.start; p < s.stop; ++p) {
    const int64_t base = slot_row(v, b, p, kv, layer) * n;
    for (int64_t e = 0; e < n; ++e)
      dst[(p - s.start) * n + e] = load_as_float(v.blocks, v.dtype, base + e);
  }
  return out;
}

void require_scales(const PagedKVCacheCollection& v) {
  if (v.scales == nullptr)
    throw py::value_error("cache: this cache has no scales (scale_granularity 0)");
}

py::array read_scales(PyPagedKVCache& self, int64_t b, int64_t kv, int64_t layer, int64_t start,
                      std::optional<int64_t> stop) {
  const Span s = check_span(self.cache, b, kv, layer, start, stop);
  const PagedKVCacheCollection v = self.cache.view();
  require_scales(v);
  const int64_t n = v.num_heads * v.scale_cols();
  py::array out = new_array<float>({s.size(), v.num_heads, v.scale_cols()});
  auto* dst = static_cast<float*>(out.mutable_data());
  for (int64_t p = s.start; p < s.stop; ++p) {
    std::memcpy(dst + (p - s.start) * n, v.scales + slot_row(v, b, p, kv, layer) * n,
                n * sizeof(float));
  }
  return out;
}

// values [n, H, cols] of the expected dtype, contiguous copy.
py::array check_values(py::handle obj, const char* name, py::dtype dtype, const char* dtype_name,
                       int64_t heads, int64_t cols) {
  py::array a = as_array(obj, name);
  if (!a.dtype().equal(dtype)) detail::throw_dtype(a, name, dtype_name);
  if (a.ndim() != 3 || a.shape(1) != heads || a.shape(2) != cols) {
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    throw py::value_error(std::string(name) + ": expected shape [n, " + str(heads) + ", " +
                          str(cols) + "], got shape " +
                          format_shape(shape.data(), int(shape.size())));
  }
  return py::module_::import("numpy").attr("ascontiguousarray")(a);
}

void write_values(PyPagedKVCache& self, int64_t b, py::handle values, int64_t kv, int64_t layer,
                  int64_t start, bool raw) {
  const PagedKVCacheCollection v = self.cache.view();
  py::array a = raw ? check_values(values, "values", storage_dtype(v.dtype),
                                   py::str(storage_dtype(v.dtype)).cast<std::string>().c_str(),
                                   v.num_heads, v.head_size)
                    : check_values(values, "values", py::dtype("float32"), "float32", v.num_heads,
                                   v.head_size);
  const Span s = check_span(self.cache, b, kv, layer, start, start + a.shape(0));
  const int64_t n = v.num_heads * v.head_size;
  const std::size_t size = dtype_size(v.dtype);
  for (int64_t p = s.start; p < s.stop; ++p) {
    const int64_t base = slot_row(v, b, p, kv, layer) * n;
    if (raw) {
      std::memcpy(static_cast<uint8_t*>(v.blocks) + base * size,
                  static_cast<const uint8_t*>(a.data()) + (p - s.start) * n * size, n * size);
      continue;
    }
    const float* src = static_cast<const float*>(a.data()) + (p - s.start) * n;
    for (int64_t e = 0; e < n; ++e) store_from_float(v.blocks, v.dtype, base + e, src[e]);
  }
}

void write_scales(PyPagedKVCache& self, int64_t b, py::handle scales, int64_t kv, int64_t layer,
                  int64_t start) {
  const PagedKVCacheCollection v = self.cache.view();
  require_scales(v);
  py::array a =
      check_values(scales, "scales", py::dtype("float32"), "float32", v.num_heads, v.scale_cols());
  const Span s = check_span(self.cache, b, kv, layer, start, start + a.shape(0));
  const int64_t n = v.num_heads * v.scale_cols();
  for (int64_t p = s.start; p < s.stop; ++p) {
    std::memcpy(v.scales + slot_row(v, b, p, kv, layer) * n,
                static_cast<const float*>(a.data()) + (p - s.start) * n, n * sizeof(float));
  }
}

PyPagedKVCache create(int64_t num_blocks, const std::string& dtype, int64_t kv_dim,
                      int64_t num_layers, int64_t page_size, int64_t num_heads, int64_t head_size,
                      int64_t scale_granularity, int64_t batch_size, int64_t max_pages_per_seq,
                      uint64_t seed) {
  PagedKVCacheConfig cfg;
  cfg.dtype = parse_dtype(dtype);
  cfg.num_blocks = num_blocks;
  cfg.kv_dim = kv_dim;
  cfg.num_layers = num_layers;
  cfg.page_size = page_size;
  cfg.num_heads = num_heads;
  cfg.head_size = head_size;
  cfg.scale_granularity = scale_granularity;
  cfg.batch_size = batch_size;
  cfg.max_pages_per_seq = max_pages_per_seq;
  PyPagedKVCache out;
  throw_if_error(PagedKVCache::create(cfg, seed, &out.cache));
  return out;
}

const char* kClassDoc = R"doc(A paged KV cache (contract §2) that owns its storage.

Storage (numpy views, zero-copy, valid while the cache lives):
  blocks         [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size]
                 float32 | uint16 (bfloat16 bits) | float16 | uint8 (float8_e4m3fn bits)
  scales         float32 [num_blocks, kv_dim, num_layers, page_size, num_heads,
                 ceil(head_size / scale_granularity)], or None without scales
  cache_lengths  uint32 [batch_size]                     (read-only; set_cache_length)
  lookup_table   uint32 [batch_size, max_pages_per_seq]  (read-only; reserve)
Position p of sequence b lives in page lookup_table[b, p // page_size], slot p % page_size;
pages come from a pool shuffled with `seed`, unassigned entries hold num_blocks.)doc";

}  // namespace

void register_cache(py::module_& m) {
  py::class_<PyPagedKVCache>(m, "PagedKVCache", kClassDoc)
      .def(py::init(&create), py::arg("num_blocks"), py::kw_only(), py::arg("dtype") = "bfloat16",
           py::arg("kv_dim") = 2, py::arg("num_layers") = 1, py::arg("page_size") = 16,
           py::arg("num_heads") = 1, py::arg("head_size") = 128, py::arg("scale_granularity") = 0,
           py::arg("batch_size") = 1, py::arg("max_pages_per_seq") = 1, py::arg("seed") = 0,
           "Zeroed storage. dtype: 'float32', 'bfloat16', 'float16' or 'float8_e4m3fn'; "
           "kv_dim 2 (K and V) or 1 (K only); scale_granularity > 0 adds a float32 scales "
           "tensor with one scale per that many elements of head_size.")
      .def_property_readonly(
          "dtype", [](const PyPagedKVCache& s) { return dtype_name(s.cache.config().dtype); })
      .def_property_readonly("num_blocks",
                             [](const PyPagedKVCache& s) { return s.cache.config().num_blocks; })
      .def_property_readonly("kv_dim",
                             [](const PyPagedKVCache& s) { return s.cache.config().kv_dim; })
      .def_property_readonly("num_layers",
                             [](const PyPagedKVCache& s) { return s.cache.config().num_layers; })
      .def_property_readonly("page_size",
                             [](const PyPagedKVCache& s) { return s.cache.config().page_size; })
      .def_property_readonly("num_heads",
                             [](const PyPagedKVCache& s) { return s.cache.config().num_heads; })
      .def_property_readonly("head_size",
                             [](const PyPagedKVCache& s) { return s.cache.config().head_size; })
      .def_property_readonly(
          "scale_granularity",
          [](const PyPagedKVCache& s) { return s.cache.config().scale_granularity; })
      .def_property_readonly("batch_size",
                             [](const PyPagedKVCache& s) { return s.cache.config().batch_size; })
      .def_property_readonly(
          "max_pages_per_seq",
          [](const PyPagedKVCache& s) { return s.cache.config().max_pages_per_seq; })
      .def_property_readonly("free_pages",
                             [](const PyPagedKVCache& s) { return s.cache.free_pages(); })
      .def_property_readonly(
          "blocks",
          [](py::object self) {
            PyPagedKVCache& s = self.cast<PyPagedKVCache&>();
            const PagedKVCacheConfig& c = s.cache.config();
            return numpy_view(
                self, storage_dtype(c.dtype),
                {c.num_blocks, c.kv_dim, c.num_layers, c.page_size, c.num_heads, c.head_size},
                s.cache.raw_blocks().data(), true);
          },
          "numpy view [num_blocks, kv_dim, num_layers, page_size, num_heads, head_size] of the "
          "storage.")
      .def_property_readonly(
          "scales",
          [](py::object self) -> py::object {
            PyPagedKVCache& s = self.cast<PyPagedKVCache&>();
            const PagedKVCacheCollection v = s.cache.view();
            if (v.scales == nullptr) return py::none();
            return numpy_view(
                self, py::dtype("float32"),
                {v.num_blocks, v.kv_dim, v.num_layers, v.page_size, v.num_heads, v.scale_cols()},
                v.scales, true);
          },
          "float32 numpy view [num_blocks, kv_dim, num_layers, page_size, num_heads, scale_cols], "
          "or None.")
      .def_property_readonly(
          "cache_lengths",
          [](py::object self) {
            PyPagedKVCache& s = self.cast<PyPagedKVCache&>();
            return numpy_view(self, py::dtype("uint32"), {s.cache.config().batch_size},
                              s.cache.raw_cache_lengths().data(), false);
          },
          "Read-only uint32 view [batch_size]: tokens cached per sequence.")
      .def_property_readonly(
          "lookup_table",
          [](py::object self) {
            PyPagedKVCache& s = self.cast<PyPagedKVCache&>();
            const PagedKVCacheConfig& c = s.cache.config();
            return numpy_view(self, py::dtype("uint32"), {c.batch_size, c.max_pages_per_seq},
                              s.cache.raw_lookup_table().data(), false);
          },
          "Read-only uint32 view [batch_size, max_pages_per_seq] of page ids (num_blocks = none).")
      .def(
          "reserve",
          [](PyPagedKVCache& s, int64_t b, int64_t n) { throw_if_error(s.cache.reserve(b, n)); },
          py::arg("b"), py::arg("num_positions"),
          "Assigns pages to sequence b so that positions [0, num_positions) are backed.")
      .def(
          "set_cache_length",
          [](PyPagedKVCache& s, int64_t b, int64_t n) {
            throw_if_error(s.cache.set_cache_length(b, n));
          },
          py::arg("b"), py::arg("length"),
          "Marks `length` tokens of sequence b as cached (they must be reserved).")
      .def(
          "cache_length",
          [](const PyPagedKVCache& s, int64_t b) {
            check_index("b", b, s.cache.config().batch_size);
            return s.cache.cache_length(b);
          },
          py::arg("b"), "Tokens cached for sequence b.")
      .def(
          "pages_used",
          [](const PyPagedKVCache& s, int64_t b) {
            check_index("b", b, s.cache.config().batch_size);
            return s.cache.pages_used(b);
          },
          py::arg("b"), "Pages assigned to sequence b.")
      .def("read", &read_decoded, py::arg("b"), py::arg("kv") = 0, py::arg("layer") = 0,
           py::arg("start") = 0, py::arg("stop") = py::none(),
           "float32 [stop - start, num_heads, head_size]: K (kv=0) or V (kv=1) of positions "
           "[start, stop) of sequence b, decoded. stop defaults to the reserved positions.")
      .def(
          "read_k",
          [](PyPagedKVCache& s, int64_t b, int64_t layer, int64_t start,
             std::optional<int64_t> stop) { return read_decoded(s, b, 0, layer, start, stop); },
          py::arg("b"), py::arg("layer") = 0, py::arg("start") = 0, py::arg("stop") = py::none(),
          "read(b, kv=0, ...): float32 [n, num_heads, head_size].")
      .def(
          "read_v",
          [](PyPagedKVCache& s, int64_t b, int64_t layer, int64_t start,
             std::optional<int64_t> stop) { return read_decoded(s, b, 1, layer, start, stop); },
          py::arg("b"), py::arg("layer") = 0, py::arg("start") = 0, py::arg("stop") = py::none(),
          "read(b, kv=1, ...): float32 [n, num_heads, head_size].")
      .def("read_raw", &read_raw, py::arg("b"), py::arg("kv") = 0, py::arg("layer") = 0,
           py::arg("start") = 0, py::arg("stop") = py::none(),
           "As read, in the storage dtype (uint8 e4m3 bits, uint16 bf16 bits, float16, float32).")
      .def("read_scales", &read_scales, py::arg("b"), py::arg("kv") = 0, py::arg("layer") = 0,
           py::arg("start") = 0, py::arg("stop") = py::none(),
           "float32 [n, num_heads, scale_cols]: the scales of positions [start, stop).")
      .def(
          "write",
          [](PyPagedKVCache& s, int64_t b, py::handle values, int64_t kv, int64_t layer,
             int64_t start) { write_values(s, b, values, kv, layer, start, false); },
          py::arg("b"), py::arg("values"), py::arg("kv") = 0, py::arg("layer") = 0,
          py::arg("start") = 0,
          "Stores float32 values [n, num_heads, head_size] at positions [start, start + n) of "
          "sequence b, converted to the cache dtype (RNE; e4m3 saturating).")
      .def(
          "write_raw",
          [](PyPagedKVCache& s, int64_t b, py::handle values, int64_t kv, int64_t layer,
             int64_t start) { write_values(s, b, values, kv, layer, start, true); },
          py::arg("b"), py::arg("values"), py::arg("kv") = 0, py::arg("layer") = 0,
          py::arg("start") = 0,
          "As write, with values already in the storage dtype (e.g. uint8 e4m3 bits).")
      .def("write_scales", &write_scales, py::arg("b"), py::arg("scales"), py::arg("kv") = 0,
           py::arg("layer") = 0, py::arg("start") = 0,
           "Stores float32 scales [n, num_heads, scale_cols] at positions [start, start + n).")
      .def("__repr__", [](const PyPagedKVCache& s) {
        const PagedKVCacheConfig& c = s.cache.config();
        return "PagedKVCache(num_blocks=" + str(c.num_blocks) + ", dtype='" + dtype_name(c.dtype) +
               "', kv_dim=" + str(c.kv_dim) + ", num_layers=" + str(c.num_layers) +
               ", page_size=" + str(c.page_size) + ", num_heads=" + str(c.num_heads) +
               ", head_size=" + str(c.head_size) +
               ", scale_granularity=" + str(c.scale_granularity) +
               ", batch_size=" + str(c.batch_size) +
               ", max_pages_per_seq=" + str(c.max_pages_per_seq) + ")";
      });
}

}  // namespace quantkv::python
