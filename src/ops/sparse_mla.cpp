// Sparse MLA attention (quantkv/sparse_mla.hpp): validation (shapes, the cache form, the slot
// and topk_length values read in place, aliasing), then the CPU loop (src/cpu/sparse_mla_driver).
// Nothing is written unless every check passes (contract §6, §7; docs/bad_inputs.md).
#include "quantkv/sparse_mla.hpp"

#include <cmath>
#include <string>

#include "core/out_of_memory.hpp"
#include "core/view_checks.hpp"
#include "cpu/sparse_mla_driver.hpp"

namespace quantkv {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// A view whose rows are read as arrays: unit stride along a row.
template <typename T>
Status check_row_stride(const char* name, const TensorView<T, 2>& v) {
  if (v.shape[0] > 0 && v.shape[1] > 1 && v.strides[1] != 1) {
    return invalid_argument(std::string(name) + ": expected unit stride along a row, got " +
                            str(v.strides[1]));
  }
  return Status::Ok();
}

Status check_shapes(const SparseMlaArgs& a, int64_t* num_slots) {
  QUANTKV_RETURN_IF_ERROR(
      check_shape("q", "[T, H, d_qk]", a.q, {kAnyExtent, kAnyExtent, kAnyExtent}));
  const int64_t t = a.q.shape[0], h = a.q.shape[1], d_qk = a.q.shape[2];
  QUANTKV_RETURN_IF_ERROR(check_shape("out", "[T, H, d_v]", a.out, {t, h, kAnyExtent}));
  const int64_t d_v = a.out.shape[2];
  if (d_v < 1 || d_v >= d_qk) {
    return invalid_argument("out: expected 0 < d_v = out.shape[2] < d_qk = q.shape[2] = " +
                            str(d_qk) + ", got " + str(d_v));
  }
  QUANTKV_RETURN_IF_ERROR(check_distinct_elements("out", a.out));
  const bool bf16 = given(a.kv), fp8 = given(a.kv_fp8);
  if (bf16 == fp8) {
    return invalid_argument(std::string("kv, kv_fp8: expected exactly one latent cache (bf16 kv "
                                        "or FlashMLA fp8 kv_fp8), got ") +
                            (bf16 ? "both" : "neither"));
  }
  if (bf16) {
    QUANTKV_RETURN_IF_ERROR(check_shape("kv", "[num_slots, d_qk]", a.kv, {kAnyExtent, d_qk}));
    QUANTKV_RETURN_IF_ERROR(check_row_stride("kv", a.kv));
    *num_slots = a.kv.shape[0];
  } else {
    if (d_v % 128 != 0) {
      return invalid_argument(
          "out: expected d_v = out.shape[2] a multiple of 128 with the fp8 cache (one fp32 "
          "scale per 128 values), got " +
          str(d_v));
    }
    const int64_t row = sparse_mla_fp8_row_bytes(d_v, d_qk - d_v);
    QUANTKV_RETURN_IF_ERROR(check_shape("kv_fp8", "[num_slots, d_v + 4 * d_v / 128 + 2 * d_rope]",
                                        a.kv_fp8, {kAnyExtent, row}));
    QUANTKV_RETURN_IF_ERROR(check_row_stride("kv_fp8", a.kv_fp8));
    *num_slots = a.kv_fp8.shape[0];
  }
  QUANTKV_RETURN_IF_ERROR(check_shape("indices", "[T, top_k]", a.indices, {t, kAnyExtent}));
  if (given(a.topk_length)) {
    QUANTKV_RETURN_IF_ERROR(check_shape("topk_length", "[T]", a.topk_length, {t}));
  }
  if (given(a.lse)) {
    QUANTKV_RETURN_IF_ERROR(check_shape("lse", "[T, H]", a.lse, {t, h}));
    QUANTKV_RETURN_IF_ERROR(check_distinct_elements("lse", a.lse));
  }
  if (!std::isfinite(a.sm_scale)) {
    return invalid_argument("sm_scale: expected a finite value, got " + std::to_string(a.sm_scale));
  }
  return Status::Ok();
}

// The values: every slot in [-1, num_slots), every topk_length in [0, top_k].
Status check_values(const SparseMlaArgs& a, int64_t num_slots) {
  const int64_t t_count = a.indices.shape[0], top_k = a.indices.shape[1];
  const bool has_len = a.topk_length.data != nullptr;
  for (int64_t t = 0; t < t_count; ++t) {
    int64_t len = top_k;
    if (has_len) {
      len = a.topk_length(t);
      if (len < 0 || len > top_k) {
        return out_of_range("topk_length: topk_length[" + str(t) + "] = " + str(len) +
                            ", expected in [0, top_k = " + str(top_k) + "]");
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t s = a.indices(t, j);
      if (s < -1 || s >= num_slots) {
        return out_of_range("indices: indices[" + str(t) + ", " + str(j) + "] = " + str(s) +
                            ", expected -1 or a slot in [0, num_slots = " + str(num_slots) + ")");
      }
    }
  }
  return Status::Ok();
}

Status run(const SparseMlaArgs& a, const Context& ctx) {
  int64_t num_slots = 0;
  QUANTKV_RETURN_IF_ERROR(check_shapes(a, &num_slots));
  // out and lse are written after every input was read by some item: neither may overlap an
  // input or the other.
  const MemoryRange kv = memory_range("kv", a.kv), kv_fp8 = memory_range("kv_fp8", a.kv_fp8),
                    q = memory_range("q", a.q), indices = memory_range("indices", a.indices),
                    len = memory_range("topk_length", a.topk_length),
                    lse = memory_range("lse", a.lse);
  QUANTKV_RETURN_IF_ERROR(
      check_no_overlap(memory_range("out", a.out), {q, kv, kv_fp8, indices, len, lse}));
  QUANTKV_RETURN_IF_ERROR(check_no_overlap(lse, {q, kv, kv_fp8, indices, len}));
  QUANTKV_RETURN_IF_ERROR(check_values(a, num_slots));
  return cpu::run_sparse_mla(a, ctx);
}

}  // namespace

Status sparse_mla_attention(const SparseMlaArgs& args, const Context& ctx) {
  return run_entry_point("sparse_mla_attention", ctx, [&] { return run(args, ctx); });
}

}  // namespace quantkv
