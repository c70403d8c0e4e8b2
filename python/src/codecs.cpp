// Element-wise codecs (contract §1) and the scale layout converters (contract §4) over numpy
// arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arrays.hpp"
#include "quantkv/formats.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::python {
namespace {

std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

// out[i] = fn(in[i]) over an array of any shape; In/Out are the numpy storage types.
template <typename In, typename Out, typename Fn>
py::object map_elements(py::handle obj, const char* name, Fn fn) {
  py::array a = as_array(obj, name);
  if (!has_dtype<In>(a)) detail::throw_dtype(a, name, NumpyType<In>::name);
  auto in = py::array_t<In, py::array::c_style>::ensure(plain_bits<In>(a));
  py::array out = new_array<Out>(shape_of(a));
  const In* src = in.data();
  Out* dst = static_cast<Out*>(out.mutable_data());
  const py::ssize_t n = in.size();
  for (py::ssize_t i = 0; i < n; ++i) dst[i] = fn(src[i]);
  return result_like(out, {obj});
}

py::array pack_e2m1(py::handle obj) {
  py::array a = as_array(obj, "x");
  if (!has_dtype<float>(a)) detail::throw_dtype(a, "x", "float32");
  if (a.ndim() < 1 || a.shape(a.ndim() - 1) % 2 != 0) {
    throw py::value_error("x: expected an even last dimension (two e2m1 values per byte)");
  }
  auto in = py::array_t<float, py::array::c_style>::ensure(a);
  std::vector<py::ssize_t> shape = shape_of(a);
  shape.back() /= 2;
  py::array out = new_array<uint8_t>(shape);
  const float* src = in.data();
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  for (py::ssize_t c = 0; c < out.size(); ++c) {
    dst[c] = e2m1_pack(float_to_e2m1(src[2 * c]), float_to_e2m1(src[2 * c + 1]));
  }
  return out;
}

py::array unpack_e2m1(py::handle obj) {
  py::array a = as_array(obj, "packed");
  if (!has_dtype<uint8_t>(a)) detail::throw_dtype(a, "packed", "uint8");
  if (a.ndim() < 1) throw py::value_error("packed: expected rank >= 1, got a scalar");
  auto in = py::array_t<uint8_t, py::array::c_style>::ensure(plain_bits<uint8_t>(a));
  std::vector<py::ssize_t> shape = shape_of(a);
  shape.back() *= 2;
  py::array out = new_array<float>(shape);
  auto* dst = static_cast<float*>(out.mutable_data());
  for (py::ssize_t i = 0; i < out.size(); ++i) dst[i] = e2m1_to_float(e2m1_get(in.data(), i));
  return out;
}

py::array linear_to_swizzled(py::handle obj) {
  py::array a = as_array(obj, "linear");
  auto lin = view_of<const uint8_t, 2>(a, "linear", "[R, Kb]");
  const auto shape = swizzled_scale_shape(lin.shape[0], lin.shape[1]);
  py::array out = new_array<uint8_t>({shape[0], shape[1], shape[2], shape[3], shape[4]});
  auto swz = view_of<uint8_t, 5>(out, "swizzled", "[R/128, Kb/4, 32, 4, 4]");
  throw_if_error(linear_to_swizzled_scales(lin, swz));
  return out;
}

py::array swizzled_to_linear(py::handle obj, int64_t rows, int64_t kb_count) {
  if (rows < 0 || kb_count < 0) {
    throw py::value_error("rows, kb_count: expected >= 0, got " + std::to_string(rows) + ", " +
                          std::to_string(kb_count));
  }
  py::array a = as_array(obj, "swizzled");
  auto swz = view_of<const uint8_t, 5>(a, "swizzled", "[R/128, Kb/4, 32, 4, 4]");
  py::array out = new_array<uint8_t>({rows, kb_count});
  throw_if_error(swizzled_to_linear_scales(swz, view_of<uint8_t, 2>(out, "linear", "[R, Kb]")));
  return out;
}

}  // namespace

void register_codecs(py::module_& m) {
  m.def(
      "encode_e4m3",
      [](py::handle x) { return map_elements<float, uint8_t>(x, "x", float_to_e4m3); },
      py::arg("x"),
      "float32 [...] -> uint8 [...] float8_e4m3fn bits (round to nearest even, saturating to "
      "±448, NaN -> 0x7F).");
  m.def(
      "decode_e4m3",
      [](py::handle b) { return map_elements<uint8_t, float>(b, "bits", e4m3_to_float); },
      py::arg("bits"), "uint8 [...] float8_e4m3fn bits -> float32 [...] (exact).");
  m.def(
      "encode_e8m0",
      [](py::handle x) { return map_elements<float, uint8_t>(x, "x", float_to_e8m0); },
      py::arg("x"),
      "float32 [...] -> uint8 [...] float8_e8m0fnu bits (|x| rounded up to a power of two).");
  m.def(
      "decode_e8m0",
      [](py::handle b) { return map_elements<uint8_t, float>(b, "bits", e8m0_to_float); },
      py::arg("bits"), "uint8 [...] float8_e8m0fnu bits -> float32 [...] = 2^(bits - 127).");
  m.def(
      "encode_e2m1",
      [](py::handle x) { return map_elements<float, uint8_t>(x, "x", float_to_e2m1); },
      py::arg("x"),
      "float32 [...] -> uint8 [...] one e2m1 code (0..15) per value, unpacked (RNE, saturating "
      "to ±6).");
  m.def(
      "decode_e2m1",
      [](py::handle c) {
        return map_elements<uint8_t, float>(c, "codes", [](uint8_t v) { return e2m1_to_float(v); });
      },
      py::arg("codes"), "uint8 [...] e2m1 codes (low 4 bits) -> float32 [...].");
  m.def("pack_e2m1", &pack_e2m1, py::arg("x"),
        "float32 [..., K] (K even) -> uint8 [..., K/2]: packed e2m1, element 2c in the low "
        "nibble of byte c.");
  m.def("unpack_e2m1", &unpack_e2m1, py::arg("packed"),
        "uint8 [..., K/2] packed e2m1 -> float32 [..., K].");
  m.def(
      "encode_bf16",
      [](py::handle x) { return map_elements<float, uint16_t>(x, "x", float_to_bf16); },
      py::arg("x"), "float32 [...] -> uint16 [...] bfloat16 bits (round to nearest even).");
  m.def(
      "decode_bf16",
      [](py::handle b) { return map_elements<uint16_t, float>(b, "bits", bf16_to_float); },
      py::arg("bits"), "uint16 [...] bfloat16 bits -> float32 [...] (exact).");

  m.def(
      "swizzled_scale_shape",
      [](int64_t rows, int64_t kb_count) {
        const auto s = swizzled_scale_shape(rows, kb_count);
        return py::make_tuple(s[0], s[1], s[2], s[3], s[4]);
      },
      py::arg("rows"), py::arg("kb_count"),
      "Shape of the 5-D swizzled scale tensor: (ceil(R/128), ceil(Kb/4), 32, 4, 4).");
  m.def("linear_to_swizzled_scales", &linear_to_swizzled, py::arg("linear"),
        "uint8 [R, Kb] linear block scales -> uint8 [ceil(R/128), ceil(Kb/4), 32, 4, 4] swizzled "
        "(row r, column kb at [r/128, kb/4, r%32, (r%128)/32, kb%4]; padding zero).");
  m.def("swizzled_to_linear_scales", &swizzled_to_linear, py::arg("swizzled"), py::arg("rows"),
        py::arg("kb_count"),
        "uint8 [ceil(R/128), ceil(Kb/4), 32, 4, 4] swizzled -> uint8 [R, Kb] linear block scales.");
}

}  // namespace quantkv::python
