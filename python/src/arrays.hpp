// numpy / DLPack plumbing of the Python module: turning arguments into typed TensorViews
// (zero-copy, strides converted from bytes to elements), results into the caller's framework,
// and library statuses into Python exceptions carrying the library's message.
//
// Low-precision dtypes (ml_dtypes' float8_e4m3fn / float8_e8m0fnu / bfloat16 ..., torch's fp8,
// fp4x2 and bf16 tensors) are taken as their raw bits: an array of such a dtype is accepted
// where the storage type lists its name (NumpyType<T>::raw), and named in the error otherwise.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/engine_layout.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv::python {

namespace py = pybind11;

// Raises the Python exception for a failed status: ValueError for invalid arguments and out
// of range indices, MemoryError, NotImplementedError, RuntimeError for the rest.
void throw_if_error(const Status& status);

// A numpy array as is (ml_dtypes arrays included), or any object with __dlpack__ (torch, JAX,
// CuPy...) imported zero-copy and writable, CPU memory only. torch's fp8/fp4x2/e8m0 tensors
// come back as uint8 arrays and bf16 as uint16 arrays whose dtype carries the original name
// (see low_precision_name). Anything else raises TypeError naming the argument.
py::array as_array(py::handle obj, const char* name);

// The low-precision dtype an array's bits hold ("float8_e4m3fn", "bfloat16",
// "float4_e2m1fn_x2"...): an ml_dtypes dtype's name or the name recorded by as_array for a
// torch tensor; "" for plain numpy dtypes.
std::string low_precision_name(const py::dtype& dtype);

// True when `obj` is a torch.Tensor (torch is not imported for the check).
bool is_torch_tensor(py::handle obj);

// `result` in the framework of the caller: a torch tensor (zero-copy, viewed as torch dtype
// `torch_dtype`, e.g. "bfloat16" for uint16 bf16 bits; "" keeps the bits' dtype) when any of
// `inputs` is a torch tensor; else, when any is an ml_dtypes array, the numpy array viewed as
// ml_dtypes' type of that name (float8_e4m3fn, float8_e8m0fnu, bfloat16; ml_dtypes has no
// packed fp4 type, so fp4 data stays uint8); else the numpy array itself.
py::object result_like(const py::array& result, std::initializer_list<py::handle> inputs,
                       const char* torch_dtype = "");

// Integer offsets from any integer array-like, as a contiguous uint32 array (values checked).
py::array_t<uint32_t> as_offsets(py::handle obj, const char* name);

// The numpy dtype each storage type travels as: fp8/fp4/scales as uint8, bf16 as uint16 bits;
// `raw`: the low-precision dtypes (space-separated names) whose bits are accepted as well.
// uint8 (packed e2m1 pairs, e4m3 data, e4m3/e8m0 scales) takes any one-byte fp8 or fp4x2
// dtype, not ml_dtypes' float4_e2m1fn (one value per byte: the wrong kind for packed data).
template <typename T>
struct NumpyType;
template <>
struct NumpyType<float> {
  static constexpr char kind = 'f';
  static constexpr int size = 4;
  static constexpr const char* name = "float32";
  static constexpr const char* raw = "";
};
template <>
struct NumpyType<uint8_t> {
  static constexpr char kind = 'u';
  static constexpr int size = 1;
  static constexpr const char* name = "uint8";
  static constexpr const char* raw = "float8_e4m3fn float8_e8m0fnu float4_e2m1fn_x2";
};
template <>
struct NumpyType<float8_e4m3fn> {
  static constexpr char kind = 'u';
  static constexpr int size = 1;
  static constexpr const char* name = "uint8 (float8_e4m3fn bits) or float8_e4m3fn";
  static constexpr const char* raw = "float8_e4m3fn";
};
template <>
struct NumpyType<bfloat16> {
  static constexpr char kind = 'u';
  static constexpr int size = 2;
  static constexpr const char* name = "uint16 (bfloat16 bits) or bfloat16";
  static constexpr const char* raw = "bfloat16";
};
template <>
struct NumpyType<uint16_t> {
  static constexpr char kind = 'u';
  static constexpr int size = 2;
  static constexpr const char* name = "uint16";
  static constexpr const char* raw = "bfloat16";
};
template <>
struct NumpyType<float16> {
  static constexpr char kind = 'f';
  static constexpr int size = 2;
  static constexpr const char* name = "float16";
  static constexpr const char* raw = "";
};
template <>
struct NumpyType<uint32_t> {
  static constexpr char kind = 'u';
  static constexpr int size = 4;
  static constexpr const char* name = "uint32";
  static constexpr const char* raw = "";
};
template <>
struct NumpyType<int32_t> {
  static constexpr char kind = 'i';
  static constexpr int size = 4;
  static constexpr const char* name = "int32";
  static constexpr const char* raw = "";
};

namespace detail {
// True when `name` is one of the space-separated words of `list`.
bool listed(const char* list, const std::string& name);
}  // namespace detail

// True when `a` has the numpy dtype of T (native byte order), or a low-precision dtype of
// T's width whose bits T accepts (NumpyType<T>::raw).
template <typename T>
bool has_dtype(const py::array& a) {
  using S = std::remove_const_t<T>;
  const py::dtype dt = a.dtype();
  const std::string low = low_precision_name(dt);
  if (!low.empty()) {
    return dt.itemsize() == NumpyType<S>::size && detail::listed(NumpyType<S>::raw, low);
  }
  return dt.kind() == NumpyType<S>::kind && dt.itemsize() == NumpyType<S>::size &&
         dt.attr("isnative").cast<bool>();
}

namespace detail {
// Rank, strides (multiples of the item size) and, for outputs, writability.
void check_layout(const py::array& a, const char* name, const char* dims, int rank, bool writable);
[[noreturn]] void throw_dtype(const py::array& a, const char* name, const char* expected);
}  // namespace detail

// A typed view of `a`: dtype, rank, strides checked here; extents are the library's job.
// The view does not own memory: keep `a` alive while it is used.
template <typename T, int Rank>
TensorView<T, Rank> view_of(const py::array& a, const char* name, const char* dims) {
  using S = std::remove_const_t<T>;
  if (!has_dtype<S>(a)) detail::throw_dtype(a, name, NumpyType<S>::name);
  detail::check_layout(a, name, dims, Rank, !std::is_const_v<T>);
  TensorView<T, Rank> v;
  // mutable_data() would raise for read-only arrays; inputs may be read-only (e.g. DLPack).
  v.data = static_cast<T*>(const_cast<void*>(a.data()));
  for (int d = 0; d < Rank; ++d) {
    v.shape[d] = a.shape(d);
    v.strides[d] = a.strides(d) / int64_t(sizeof(S));
  }
  return v;
}

// A new C-contiguous numpy array of T's numpy dtype.
template <typename T>
py::array new_array(std::vector<py::ssize_t> shape) {
  using S = std::remove_const_t<T>;
  return py::array(
      py::dtype(std::string(1, NumpyType<S>::kind) + std::to_string(NumpyType<S>::size)),
      std::move(shape));
}

// `a` (which has_dtype<T>) viewed as T's plain numpy dtype, e.g. an ml_dtypes bfloat16 array
// as uint16: numpy's own conversions would convert the values, not keep the bits.
template <typename T>
py::array plain_bits(const py::array& a) {
  using S = std::remove_const_t<T>;
  if (low_precision_name(a.dtype()).empty()) return a;
  return a.attr("view")(std::string(1, NumpyType<S>::kind) + std::to_string(NumpyType<S>::size));
}

// `out=` when given (checked by view_of later), else a new array of T with `shape`.
template <typename T>
py::array out_or_new(const py::object& out, std::vector<py::ssize_t> shape) {
  return out.is_none() ? new_array<T>(std::move(shape)) : as_array(out, "out");
}

// The output [rows, cols] of a GEMM entry point (linear, fused_experts): `out` when given (its
// dtype, float32 or else bfloat16, chooses *f32), else a new array of `out_dtype` ('bfloat16' or
// 'float32'; ValueError otherwise).
py::array gemm_output(const py::object& out, const std::string& out_dtype, int64_t rows,
                      int64_t cols, bool* f32);

// Option strings shared by the operations' files: 'power_of_two' / 'float' (ops.cpp) and
// 'positions' / 'global_slots' (engine_layout.cpp); ValueError otherwise.
ScaleMode parse_scale_mode(std::string name);
BlockFormat parse_format(std::string name);  // "nvfp4", "mxfp4", "mxfp8"
IndexOutput parse_index_output(std::string name);
IndexKFormat parse_index_k_format(std::string name);  // "fp8", "mxfp4", "nvfp4"

// One layer's indexer K cache in the engines' layout (engine_layout.cpp) with the arrays it
// views, kept alive while it is used: the uint8 buffer (2-D needs page_size; 3-D and 4-D carry
// it), an int32 or uint32 block table, the cache lengths. ValueError on a bad geometry.
struct EngineArrays {
  py::array data, table, lengths;
  EngineIndexerKCache cache;
};
EngineArrays engine_arrays(py::handle kv_obj, py::handle table_obj, py::handle lengths_obj,
                           std::optional<int64_t> page_size, bool writable,
                           IndexKFormat format = IndexKFormat::kFp8, float global_scale = 1.0f);

// The threads argument every operation takes.
Context make_context(int num_threads, int64_t scores_budget_bytes = 0);

// Registration of the module's parts (one file each).
void register_codecs(py::module_& m);
void register_cache(py::module_& m);
void register_ops(py::module_& m);
void register_linear(py::module_& m);
void register_moe(py::module_& m);
void register_checkpoint(py::module_& m);
void register_experts_checkpoint(py::module_& m);
void register_rope(py::module_& m);
void register_cache_view(py::module_& m);
void register_engine_layout(py::module_& m);
void register_sparse_mla(py::module_& m);

}  // namespace quantkv::python
