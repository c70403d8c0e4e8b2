// numpy / DLPack plumbing of the Python module (see arrays.hpp).
#include "arrays.hpp"

#include <dlpack/dlpack.h>

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

namespace {

const char* kDtypeTag = "quantkv_dtype";  // dtype metadata key: the low-precision name

std::string type_name(py::handle obj) {
  return py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
}

// The numpy dtype of a DLPack element type: plain dtypes by (code, bits); bf16 as uint16
// tagged "bfloat16".
py::dtype dtype_of(const DLDataType& t, const char* name) {
  py::module_ np = py::module_::import("numpy");
  if (t.lanes == 1) {
    const std::string bits = std::to_string(t.bits / 8);
    switch (t.code) {
      case kDLInt:
        return py::dtype("i" + bits);
      case kDLUInt:
        return py::dtype("u" + bits);
      case kDLFloat:
        return py::dtype("f" + bits);
      case kDLBfloat:
        if (t.bits == 16)
          return py::dtype::from_args(np.attr("dtype")(
              "u2", py::arg("metadata") = py::dict(py::arg(kDtypeTag) = "bfloat16")));
        break;
      default:
        break;
    }
  }
  throw py::value_error(std::string(name) + ": unsupported DLPack dtype (code " +
                        std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " +
                        std::to_string(t.lanes) + " lanes)");
}

// Takes ownership of a "dltensor" capsule's DLManagedTensor and wraps its memory in a numpy
// array (writable, zero-copy) that calls the producer's deleter when released.
py::array import_capsule(py::object capsule, const char* name) {
  PyObject* cap = capsule.ptr();
  if (!PyCapsule_IsValid(cap, "dltensor")) {
    throw py::value_error(std::string(name) + ": __dlpack__() did not return a DLPack capsule");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  PyCapsule_SetName(cap, "used_dltensor");  // consumed: the producer no longer frees it
  py::capsule owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    throw py::value_error(std::string(name) + ": expected a CPU tensor, got DLPack device type " +
                          std::to_string(int(t.device.device_type)) +
                          " (this module runs the CPU backend; move the tensor with .cpu())");
  }
  const py::dtype dtype = dtype_of(t.dtype, name);
  std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim), strides(t.ndim);
  int64_t contiguous = 1;  // DLPack leaves strides null for C-contiguous tensors
  for (int d = t.ndim - 1; d >= 0; --d) {
    strides[d] = (t.strides != nullptr ? t.strides[d] : contiguous) * dtype.itemsize();
    contiguous *= shape[d];
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return py::array(dtype, std::move(shape), std::move(strides), data, owner);
}

// torch tensors whose dtype DLPack (and numpy) cannot carry: exported as their uint8 bits.
const char* kTorchRawBytes = "float8_e4m3fn float8_e5m2 float8_e8m0fnu float4_e2m1fn_x2";

// Imports a torch tensor; fp8 / fp4x2 / e8m0 tensors go through a uint8 view of their bits
// and come back as uint8 arrays tagged with the torch dtype's name.
py::array import_torch(py::handle tensor, const char* name) {
  const std::string dtype =
      py::str(tensor.attr("dtype")).cast<std::string>().substr(6);  // "torch."
  if (!detail::listed(kTorchRawBytes, dtype))
    return import_capsule(tensor.attr("__dlpack__")(), name);
  py::object bytes = tensor.attr("view")(py::module_::import("torch").attr("uint8"));
  py::array a = import_capsule(bytes.attr("__dlpack__")(), name);
  py::dtype tagged = py::dtype::from_args(py::module_::import("numpy").attr("dtype")(
      "u1", py::arg("metadata") = py::dict(py::arg(kDtypeTag) = dtype)));
  return a.attr("view")(tagged);
}

}  // namespace

bool is_torch_tensor(py::handle obj) {
  PyObject* torch = PyImport_GetModule(py::str("torch").ptr());  // new reference or NULL
  if (torch == nullptr) {
    PyErr_Clear();
    return false;
  }
  py::object module = py::reinterpret_steal<py::object>(torch);
  return py::isinstance(obj, module.attr("Tensor"));
}

py::array as_array(py::handle obj, const char* name) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::type_error(std::string(name) +
                         ": expected a numpy array or an object with "
                         "__dlpack__, got " +
                         type_name(obj));
  }
  try {
    return is_torch_tensor(obj) ? import_torch(obj, name)
                                : import_capsule(obj.attr("__dlpack__")(), name);
  } catch (py::error_already_set& e) {
    throw py::value_error(std::string(name) + ": cannot import through DLPack: " + e.what());
  }
}

std::string low_precision_name(const py::dtype& dtype) {
  py::object metadata = dtype.attr("metadata");
  if (!metadata.is_none() && metadata.contains(kDtypeTag)) {
    return metadata[kDtypeTag].cast<std::string>();
  }
  const std::string module = py::str(dtype.attr("type").attr("__module__")).cast<std::string>();
  if (module.rfind("ml_dtypes", 0) == 0) return py::str(dtype.attr("name")).cast<std::string>();
  return "";
}

namespace {
bool is_ml_dtypes_array(py::handle h) {
  if (!py::isinstance<py::array>(h)) return false;
  const py::dtype dtype = py::reinterpret_borrow<py::array>(h).dtype();
  return py::str(dtype.attr("type").attr("__module__")).cast<std::string>().rfind("ml_dtypes", 0) ==
         0;
}

// ml_dtypes in, ml_dtypes out: the result's bits viewed as ml_dtypes' type of that name
// (float8_e4m3fn, float8_e8m0fnu, bfloat16); unchanged where ml_dtypes has none (packed fp4).
py::object as_ml_dtypes(const py::array& result, const char* dtype_name) {
  py::module_ ml = py::module_::import("ml_dtypes");
  if (!py::hasattr(ml, dtype_name)) return result;
  return result.attr("view")(ml.attr(dtype_name));
}
}  // namespace

py::object result_like(const py::array& result, std::initializer_list<py::handle> inputs,
                       const char* torch_dtype) {
  bool torch_input = false, ml_input = false;
  for (py::handle h : inputs) {
    torch_input = torch_input || is_torch_tensor(h);
    ml_input = ml_input || is_ml_dtypes_array(h);
  }
  if (!torch_input) {
    if (ml_input && *torch_dtype != 0) return as_ml_dtypes(result, torch_dtype);
    return result;
  }
  py::module_ torch = py::module_::import("torch");
  // uint16 is not a DLPack type every torch takes: bf16 bits cross as int16.
  const bool two_bytes = result.dtype().itemsize() == 2 && result.dtype().kind() == 'u';
  py::object t = torch.attr("from_dlpack")(two_bytes ? py::object(result.attr("view")("i2"))
                                                     : py::object(result));
  if (*torch_dtype != 0 && py::hasattr(torch, torch_dtype))
    t = t.attr("view")(torch.attr(torch_dtype));
  return t;
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

bool listed(const char* list, const std::string& name) {
  const std::string words = std::string(" ") + list + " ";
  return !name.empty() && words.find(" " + name + " ") != std::string::npos;
}

void check_layout(const py::array& a, const char* name, const char* dims, int rank, bool writable) {
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
    throw py::value_error(n + ": the output array is read-only");
  }
}

void throw_dtype(const py::array& a, const char* name, const char* expected) {
  const std::string low = low_precision_name(a.dtype());
  throw py::value_error(std::string(name) + ": expected dtype " + expected + ", got " +
                        (low.empty() ? std::string(py::str(a.dtype())) : low) + " (" +
                        std::to_string(a.dtype().itemsize()) + " bytes)");
}

}  // namespace detail

Context make_context(int num_threads, int64_t scores_budget_bytes) {
  if (num_threads < 0) {
    throw py::value_error("num_threads: expected >= 0 (0 = all), got " +
                          std::to_string(num_threads));
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

py::array gemm_output(const py::object& out, const std::string& out_dtype, int64_t rows,
                      int64_t cols, bool* f32) {
  if (!out.is_none()) {
    py::array a = as_array(out, "out");
    *f32 = has_dtype<float>(a);
    return a;
  }
  if (out_dtype == "float32") {
    *f32 = true;
    return new_array<float>({rows, cols});
  }
  if (out_dtype == "bfloat16") {
    *f32 = false;
    return new_array<bfloat16>({rows, cols});
  }
  throw py::value_error("out_dtype: expected 'bfloat16' or 'float32', got '" + out_dtype + "'");
}

}  // namespace quantkv::python
