// The `quantkv` Python module: version, build and ISA information; the codecs, the paged
// cache and the operations are registered from their own files.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arrays.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/info.hpp"

namespace quantkv::python {
namespace {

void register_info(py::module_& m) {
  m.attr("__version__") = version_string();
  m.def("version", &version_string, "The library version, e.g. '0.1.0'.");
  m.def(
      "build_info",
      [] {
        const BuildInfo info = build_info();
        py::dict d;
        d["openmp"] = info.openmp;
        d["cuda_compiled"] = info.cuda_compiled;
        d["cuda_architectures"] = info.cuda_architectures;
        d["compiler"] = info.compiler;
        return d;
      },
      "How the library was built: {'openmp', 'cuda_compiled', 'cuda_architectures', 'compiler'}.");
  m.def(
      "max_supported_isa", [] { return std::string(isa_level_name(max_supported_isa())); },
      "The best CPU code path this machine supports: 'scalar', 'avx2' or 'avx512'.");
  m.def(
      "isa_level", [] { return std::string(isa_level_name(active_isa())); },
      "The CPU code path in use ('scalar', 'avx2' or 'avx512').");
  m.def(
      "set_isa_level",
      [](const std::string& name) {
        IsaLevel level;
        throw_if_error(parse_isa_level(name, &level));
        throw_if_error(set_isa_level(level));
      },
      py::arg("level"),
      "Forces a CPU code path: 'scalar', 'avx2' or 'avx512' (ValueError if the CPU lacks it).");
}

}  // namespace
}  // namespace quantkv::python

PYBIND11_MODULE(_quantkv, m) {
  using namespace quantkv::python;
  m.doc() =
      "quantkv: low-precision kernels for LLM inference over a paged KV cache.\n\n"
      "Arrays are numpy arrays (ml_dtypes included) or any CPU object with __dlpack__ (torch\n"
      "tensors...), taken zero-copy. fp8 and fp4 data travel as their bits: uint8 or a\n"
      "float8_e4m3fn / float8_e8m0fnu / float4_e2m1fn_x2 dtype (two e2m1 values per byte, low\n"
      "nibble first), bfloat16 as uint16 bits or a bfloat16 dtype. Results come back as numpy\n"
      "arrays (fp8 / bfloat16 ones typed with ml_dtypes when an input is an ml_dtypes array),\n"
      "or as torch tensors when the inputs are torch tensors. Bad shapes or dtypes raise\n"
      "ValueError with the library's message.";
  register_info(m);
  register_codecs(m);
  register_cache(m);
  register_cache_view(m);
  register_ops(m);
  register_linear(m);
  register_moe(m);
  register_checkpoint(m);
  register_experts_checkpoint(m);
  register_rope(m);
  register_engine_layout(m);
  register_sparse_mla(m);
}
