// Python binding of sparse MLA attention (quantkv/sparse_mla.hpp; docs/sparse_mla.md).
#include "quantkv/sparse_mla.hpp"

#include <pybind11/pybind11.h>

#include <cstdint>

#include "arrays.hpp"

namespace quantkv::python {
namespace {

py::tuple sparse_mla_op(py::handle q_obj, py::handle indices_obj, float sm_scale, py::handle kv_obj,
                        py::handle kv_fp8_obj, int64_t d_v, py::handle topk_length_obj,
                        const py::object& out_obj, const py::object& lse_obj, int num_threads) {
  SparseMlaArgs a;
  a.sm_scale = sm_scale;
  py::array q = as_array(q_obj, "q");
  a.q = view_of<const bfloat16, 3>(q, "q", "[T, H, d_qk] bfloat16");
  py::array kv, kv_fp8, topk_length;
  if (!kv_obj.is_none()) {
    kv = as_array(kv_obj, "kv");
    a.kv = view_of<const bfloat16, 2>(kv, "kv", "[num_slots, d_qk] bfloat16");
  }
  if (!kv_fp8_obj.is_none()) {
    kv_fp8 = as_array(kv_fp8_obj, "kv_fp8");
    a.kv_fp8 = view_of<const uint8_t, 2>(kv_fp8, "kv_fp8", "[num_slots, row_bytes] uint8");
  }
  py::array indices = as_array(indices_obj, "indices");
  a.indices = view_of<const int32_t, 2>(indices, "indices", "[T, top_k] int32");
  if (!topk_length_obj.is_none()) {
    topk_length = as_array(topk_length_obj, "topk_length");
    a.topk_length = view_of<const int32_t, 1>(topk_length, "topk_length", "[T] int32");
  }
  if (d_v <= 0) throw py::value_error("d_v: expected a positive size, got " + std::to_string(d_v));
  const auto t = py::ssize_t(a.q.shape[0]), h = py::ssize_t(a.q.shape[1]);
  py::array out = out_or_new<bfloat16>(out_obj, {t, h, py::ssize_t(d_v)});
  a.out = view_of<bfloat16, 3>(out, "out", "[T, H, d_v] bfloat16");
  py::array lse = lse_obj.is_none() ? new_array<float>({t, h}) : as_array(lse_obj, "lse");
  a.lse = view_of<float, 2>(lse, "lse", "[T, H] float32");
  const Context ctx = make_context(num_threads);
  Status st;
  {
    py::gil_scoped_release nogil;
    st = sparse_mla_attention(a, ctx);
  }
  throw_if_error(st);
  return py::make_tuple(out_obj.is_none() ? result_like(out, {q_obj}, "bfloat16") : out_obj,
                        lse_obj.is_none() ? result_like(lse, {q_obj}) : lse_obj);
}

}  // namespace

void register_sparse_mla(py::module_& m) {
  m.def("sparse_mla_fp8_row_bytes", &sparse_mla_fp8_row_bytes, py::arg("d_v") = 512,
        py::arg("d_rope") = 64,
        R"doc(Bytes of one fp8 latent-cache row (FlashMLA's 'fp8_ds_mla'): d_v e4m3 codes,
d_v / 128 float32 scales, d_rope bfloat16 values (656 for 512 + 64).)doc");
  m.def("sparse_mla_attention", &sparse_mla_op, py::arg("q"), py::arg("indices"),
        py::arg("sm_scale"), py::kw_only(), py::arg("kv") = py::none(),
        py::arg("kv_fp8") = py::none(), py::arg("d_v") = 512, py::arg("topk_length") = py::none(),
        py::arg("out") = py::none(), py::arg("lse") = py::none(), py::arg("num_threads") = 0,
        R"doc(Sparse MLA attention (docs/sparse_mla.md): DeepSeek-V3.2's attention over the
top-k latent-cache slots the indexer picked (index_output='global_slots'), FlashMLA's sparse
semantics. Per token t and head h, over s = indices[t, j] (j < top_k, or j < topk_length[t];
-1 skipped): score_j = sm_scale * q[t, h] . kv[s], out[t, h] = softmax(score) . kv[s, :d_v],
lse[t, h] = log(sum_j exp(score_j)); a token without a valid slot gets out 0 and lse -inf.

q: bfloat16 [T, H, d_qk] absorbed queries; exactly one of kv: bfloat16 [num_slots, d_qk] and
kv_fp8: uint8 [num_slots, sparse_mla_fp8_row_bytes(d_v, d_qk - d_v)] (a paged cache viewed as
[pages * page_size, row]); indices: int32 [T, top_k]; topk_length: int32 [T] or None; d_v: the
value width (the first d_v latent values; 512 in DeepSeek-V3.2). Returns (out bfloat16
[T, H, d_v], lse float32 [T, H]) in the caller's framework, or fills `out` / `lse`.)doc");
}

}  // namespace quantkv::python
