// numpy / DLPack plumbing of the Python module: turning arguments into typed TensorViews
// (zero-copy, strides converted from bytes to elements), and library statuses into Python
// exceptions carrying the library's message.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "quantkv/context.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"

namespace quantkv::python {

namespace py = pybind11;

// Raises the Python exception for a failed status: ValueError for invalid arguments and out
// of range indices, MemoryError, NotImplementedError, RuntimeError for the rest.
void throw_if_error(const Status& status);

// A numpy array as is, or any object with __dlpack__ imported with numpy.from_dlpack (CPU
// tensors only; zero-copy). Anything else raises TypeError naming the argument.
py::array as_array(py::handle obj, const char* name);

// Integer offsets from any integer array-like, as a contiguous uint32 array (values checked).
py::array_t<uint32_t> as_offsets(py::handle obj, const char* name);

// The numpy dtype each storage type travels as: fp8/fp4/scales as uint8, bf16 as uint16 bits.
template <typename T>
struct NumpyType;
template <> struct NumpyType<float> { static constexpr char kind = 'f'; static constexpr int size = 4; static constexpr const char* name = "float32"; };
template <> struct NumpyType<uint8_t> { static constexpr char kind = 'u'; static constexpr int size = 1; static constexpr const char* name = "uint8"; };
template <> struct NumpyType<float8_e4m3fn> { static constexpr char kind = 'u'; static constexpr int size = 1; static constexpr const char* name = "uint8 (float8_e4m3fn bits)"; };
template <> struct NumpyType<bfloat16> { static constexpr char kind = 'u'; static constexpr int size = 2; static constexpr const char* name = "uint16 (bfloat16 bits)"; };
template <> struct NumpyType<uint16_t> { static constexpr char kind = 'u'; static constexpr int size = 2; static constexpr const char* name = "uint16"; };
template <> struct NumpyType<float16> { static constexpr char kind = 'f'; static constexpr int size = 2; static constexpr const char* name = "float16"; };
template <> struct NumpyType<uint32_t> { static constexpr char kind = 'u'; static constexpr int size = 4; static constexpr const char* name = "uint32"; };
template <> struct NumpyType<int32_t> { static constexpr char kind = 'i'; static constexpr int size = 4; static constexpr const char* name = "int32"; };

// True when `a` has the numpy dtype of T (native byte order).
template <typename T>
bool has_dtype(const py::array& a) {
  using S = std::remove_const_t<T>;
  const py::dtype dt = a.dtype();
  return dt.kind() == NumpyType<S>::kind && dt.itemsize() == NumpyType<S>::size &&
         dt.attr("isnative").cast<bool>();
}

namespace detail {
// Rank, strides (multiples of the item size) and, for outputs, writability.
void check_layout(const py::array& a, const char* name, const char* dims, int rank,
                  bool writable);
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
  return py::array(py::dtype(std::string(1, NumpyType<S>::kind) + std::to_string(NumpyType<S>::size)),
                   std::move(shape));
}

// The threads argument every operation takes.
Context make_context(int num_threads, int64_t scores_budget_bytes = 0);

// Registration of the module's parts (one file each).
void register_codecs(py::module_& m);
void register_cache(py::module_& m);
void register_ops(py::module_& m);
void register_rope(py::module_& m);

}  // namespace quantkv::python
