// numpy / DLPack plumbing of the Python module (see arrays.hpp).
#include "arrays.hpp"

#include <string>

namespace quantkv::python {

void throw_if_error(const Status& status) {
  if (status.ok()) return;
  const std::string& msg = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      throw py::value_error(msg);
    case StatusCode::kResourceExhausted:
      PyErr_SetString(PyExc_MemoryError, msg.c_str());
      throw py::error_already_set();
    case StatusCode::kUnimplemented:
      PyErr_SetString(PyExc_NotImplementedError, msg.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(status.to_string());
  }
}

py::array as_array(py::handle obj, const char* name) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  if (py::hasattr(obj, "__dlpack__")) {
    try {
      return py::module_::import("numpy").attr("from_dlpack")(obj);
    } catch (py::error_already_set& e) {
      throw py::value_error(std::string(name) +
                            ": cannot import through DLPack (only CPU tensors with a numpy dtype "
                            "are accepted; fp8/fp4 travel as uint8, bf16 as uint16): " +
                            e.what());
    }
  }
  throw py::type_error(std::string(name) + ": expected a numpy array or an object with "
                       "__dlpack__, got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
}

py::array_t<uint32_t> as_offsets(py::handle obj, const char* name) {
  py::module_ np = py::module_::import("numpy");
  py::array a = (py::isinstance<py::array>(obj) || !py::hasattr(obj, "__dlpack__"))
                    ? py::array(np.attr("asarray")(obj))
                    : as_array(obj, name);
  const char kind = a.dtype().kind();
  if (kind != 'u' && kind != 'i') {
    throw py::value_error(std::string(name) + ": expected an integer array, got dtype " +
                          std::string(py::str(a.dtype())));
  }
  if (a.size() > 0) {
    const bool negative = np.attr("any")(np.attr("less")(a, 0)).cast<bool>();
    const bool too_big = np.attr("any")(np.attr("greater")(a, py::int_(UINT32_MAX))).cast<bool>();
    if (negative || too_big) {
      throw py::value_error(std::string(name) + ": values must lie in [0, 2^32), got [" +
                            std::string(py::str(np.attr("min")(a))) + ", " +
                            std::string(py::str(np.attr("max")(a))) + "]");
    }
  }
  return np.attr("ascontiguousarray")(a, "uint32");
}

namespace detail {

void check_layout(const py::array& a, const char* name, const char* dims, int rank,
                  bool writable) {
  const std::string n(name);
  if (a.ndim() != rank) {
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    throw py::value_error(n + ": expected rank " + std::to_string(rank) + " " + dims +
                          ", got shape " + format_shape(shape.data(), int(shape.size())));
  }
  for (int d = 0; d < rank; ++d) {
    if (a.strides(d) % a.itemsize() != 0) {
      throw py::value_error(n + ": strides must be multiples of the element size, got stride " +
                            std::to_string(a.strides(d)) + " bytes in dimension " +
                            std::to_string(d));
    }
  }
  if (writable && !a.writeable()) {
    throw py::value_error(n + ": the output array is read-only (arrays from numpy.from_dlpack "
                          "are; pass a writable numpy array)");
  }
}

void throw_dtype(const py::array& a, const char* name, const char* expected) {
  throw py::value_error(std::string(name) + ": expected dtype " + expected + ", got " +
                        std::string(py::str(a.dtype())));
}

}  // namespace detail

Context make_context(int num_threads, int64_t scores_budget_bytes) {
  if (num_threads < 0) {
    throw py::value_error("num_threads: expected >= 0 (0 = all), got " + std::to_string(num_threads));
  }
  Context ctx;
  ctx.num_threads = num_threads;
  if (scores_budget_bytes < 0) {
    throw py::value_error("scores_budget_bytes: expected >= 0, got " +
                          std::to_string(scores_budget_bytes));
  }
  if (scores_budget_bytes > 0) ctx.scores_budget_bytes = std::size_t(scores_budget_bytes);
  return ctx;
}

}  // namespace quantkv::python
