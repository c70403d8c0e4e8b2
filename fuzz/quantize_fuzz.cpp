// quantize_dynamic_block_scaled (contract §5): x [M, K] (fp32 or bf16, padded strides, specials)
// -> NVFP4 / MXFP4 / MXFP8 data and 5-D swizzled scales, with one defect at a time (K not a
// multiple of SF_VECTOR_SIZE, a bad global scale for NVFP4, wrong data / scale shapes, a
// non-contiguous scale tensor, null pointers, an unknown format). Checks: the status, no write
// after an error, nothing written outside data / scales, zero scale padding, and every block
// bit-exact against the recipe of contract §5 (blocks holding NaN or inf are only checked for
// having been written).
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/scale_layout.hpp"

namespace quantkv::fuzz {
namespace {

template <typename Elem>
void run(FuzzInput& in) {
  Context ctx = in.context();
  Expectation ex;
  BlockFormat f = BlockFormat(in.int_in(0, 2));
  const int sfv = sf_vector_size(f);
  const int64_t M = in.int_in(0, 140), kb = in.int_in(0, 5);
  int64_t K = kb * sfv;
  if (in.one_in(12)) {
    K += in.pick<int64_t>({2, 8, 16});
    ex.defect(K % sfv != 0, "K % SF_VECTOR_SIZE != 0");
  }
  float g = in.coin() ? 448.0f * 6.0f / float(in.int_in(1, 1000)) : 1.0f;
  if (in.one_in(10)) {
    g = in.pick<float>({0.0f, -1.0f, __builtin_inff(), __builtin_nanf("")});
    ex.defect(f == BlockFormat::kNVFP4, "NVFP4 global_scale not finite > 0");
  }
  const int64_t rb = K % 2 == 0 ? row_bytes(f, K) : K;  // odd K only happens with a defect
  std::array<int64_t, 2> data_shape{M, rb};
  std::array<int64_t, 5> sc_shape = swizzled_scale_shape(M, K / sfv);
  switch (in.one_in(8) ? in.int_in(0, 2) : -1) {
    case 0:
      data_shape[1] = rb + 1;
      ex.defect(true, "data row bytes");
      break;
    case 1:
      data_shape[0] = M + 1;
      ex.defect(true, "data rows");
      break;
    case 2:
      sc_shape[0] += 1;
      ex.defect(true, "scales shape");
      break;
    default:
      break;
  }
  Buffer<Elem, 2> x(in, {M, K}, true);
  Buffer<uint8_t, 2> data(in, data_shape, true);
  Buffer<uint8_t, 5> scales(in, sc_shape, in.one_in(10));
  ex.defect(!row_major(scales.view()), "scales not contiguous");
  std::vector<float> values(x.storage().size());
  const int magnitude = int(in.int_in(-20, 20));
  for (size_t i = 0; i < values.size(); ++i) {
    float v = in.one_in(80) ? in.value() : std::ldexp(in.finite_value(), magnitude);
    if constexpr (std::is_same_v<Elem, bfloat16>) {
      x.storage()[i].bits = float_to_bf16(v);
      v = bf16_to_float(x.storage()[i].bits);
    } else {
      x.storage()[i] = v;
    }
    values[i] = v;
  }
  if (in.one_in(30)) {
    f = BlockFormat(7);
    ex.defect(true, "unknown format");
  }
  if (in.one_in(16) && data.view().numel() > 0) {
    data.view().data = nullptr;
    ex.defect(true, "data null");
  }
  data.fill_pattern(0xA5);
  scales.fill_pattern(0xA5);
  data.snapshot();
  scales.snapshot();
  x.snapshot();
  const Status st = quantize_dynamic_block_scaled(x.cview(), g, f, data.view(), scales.view(), ctx);
  check(x.unchanged(), "quantize wrote its input");
  if (!verify_status(st, ex, "quantize_dynamic_block_scaled", {"contiguous", "unit stride"})) {
    check(data.unchanged() && scales.unchanged(),
          "quantize wrote after an error: " + st.to_string());
    return;
  }
  check(data.outside_unchanged() && scales.outside_unchanged(),
        "quantize wrote outside data / scales");
  const int64_t kbc = K / sfv;
  std::vector<char> real(size_t(scales.view().numel()), 0);
  const float inv_g = 1.0f / g;
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t b = 0; b < kbc; ++b) {
      real[size_t(swizzled_scale_offset(r, b, kbc))] = 1;
      float amax = 0;
      bool finite = true;
      std::vector<float> blk(static_cast<size_t>(sfv));
      for (int i = 0; i < sfv; ++i) {
        blk[i] = values[size_t(&x.at({r, b * sfv + i}) - x.storage().data())];
        finite &= bool(std::isfinite(blk[i]));
        amax = std::max(amax, std::fabs(blk[i]));
      }
      if (!finite) continue;
      const uint8_t code = scales.view().data[swizzled_scale_offset(r, b, kbc)];
      std::vector<uint8_t> want(size_t(row_bytes(f, sfv)));
      uint8_t want_code;
      if (f == BlockFormat::kNVFP4) {
        want_code = float_to_e4m3(g * (amax * (1.0f / 6.0f)));
        const float sf = e4m3_to_float(want_code);
        const float out = sf != 0.0f ? 1.0f / (sf * inv_g) : 0.0f;
        for (int i = 0; i < sfv; i += 2)
          want[i / 2] = e2m1_pack(float_to_e2m1(blk[i] * out), float_to_e2m1(blk[i + 1] * out));
      } else {
        want_code = float_to_e8m0(amax / (f == BlockFormat::kMXFP8 ? 448.0f : 6.0f));
        const float sf = e8m0_to_float(want_code);
        for (int i = 0; i < sfv; ++i) {
          if (f == BlockFormat::kMXFP8)
            want[i] = float_to_e4m3(blk[i] / sf);
          else if (i % 2 == 0)
            want[i / 2] = e2m1_pack(float_to_e2m1(blk[i] / sf), float_to_e2m1(blk[i + 1] / sf));
        }
      }
      check(code == want_code,
            "quantize: scale code of row " + std::to_string(r) + " block " + std::to_string(b));
      for (size_t i = 0; i < want.size(); ++i) {
        check(data.at({r, int64_t(b * want.size() + i)}) == want[i],
              "quantize: data of row " + std::to_string(r) + " block " + std::to_string(b));
      }
    }
  }
  for (size_t i = 0; i < real.size(); ++i) {
    if (!real[i]) check(scales.view().data[i] == 0, "quantize: scale padding not zero");
  }
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  if (in.coin())
    run<float>(in);
  else
    run<quantkv::bfloat16>(in);
  return 0;
}
