// indexer_q_prepare (contract §5): q [T, H, D] and weights [T, H] (padded strides, specials) ->
// e4m3 q and q_s, with one defect at a time (shapes, null pointers, negative strides, scale
// mode). Checks: the status, no write after an error, nothing written outside q_fp8 / q_s, the
// codes of contract §5 and q_s = w · H^-0.5 · D^-0.5 · s within a few ulps.
#include <cmath>

#include "fuzz_input.hpp"
#include "quantkv/indexer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  Context ctx = in.context();
  Expectation ex;
  const int64_t T = in.int_in(0, 6), H = in.int_in(1, 5), D = in.int_in(1, 40);
  std::array<int64_t, 3> q_shape{T, H, D}, fp8_shape{T, H, D};
  std::array<int64_t, 2> w_shape{T, H}, qs_shape{T, H};
  switch (in.one_in(6) ? in.int_in(0, 4) : -1) {
    case 0:
      fp8_shape[2] = D + 1;
      ex.defect(true, "q_fp8 D");
      break;
    case 1:
      fp8_shape[0] = T + 1;
      ex.defect(true, "q_fp8 T");
      break;
    case 2:
      w_shape[1] = H + 1;
      ex.defect(true, "weights H");
      break;
    case 3:
      qs_shape[0] = T + 1;
      ex.defect(true, "q_s T");
      break;
    case 4:
      q_shape[1] = 0;
      w_shape[1] = 0;
      fp8_shape[1] = 0;
      qs_shape[1] = 0;
      ex.defect(true, "H = 0");
      break;
    default:
      break;
  }
  Buffer<float, 3> q(in, q_shape, true);
  Buffer<float, 2> w(in, w_shape, true);
  Buffer<float8_e4m3fn, 3> q8(in, fp8_shape, true);
  Buffer<float, 2> qs(in, qs_shape, true);
  for (auto& v : q.storage())
    v = in.one_in(40) ? in.value() : in.finite_value() * float(in.pick<int>({1, 1, 50}));
  for (auto& v : w.storage()) v = in.one_in(20) ? in.value() : in.finite_value();
  ScaleMode mode = in.coin() ? ScaleMode::kPowerOfTwo : ScaleMode::kFloat;
  if (in.one_in(20)) {
    mode = ScaleMode(-1);
    ex.defect(true, "unknown scale mode");
  }
  if (in.one_in(16) && q8.view().numel() > 0) {
    q8.view().data = nullptr;
    ex.defect(true, "q_fp8 null");
  }
  if (in.one_in(16) && w.view().numel() > 0) {
    w.view().strides[1] = -1;
    ex.defect(true, "weights negative stride");
  }
  q8.fill_pattern(0xA5);
  qs.fill_pattern(0x5A);
  q8.snapshot();
  qs.snapshot();
  q.snapshot();
  const Status st = indexer_q_prepare(q.cview(), w.cview(), q8.view(), qs.view(), mode, ctx);
  check(q.unchanged(), "indexer_q_prepare wrote q");
  if (!verify_status(st, ex, "indexer_q_prepare", {"contiguous"})) {
    check(q8.unchanged() && qs.unchanged(),
          "indexer_q_prepare wrote after an error: " + st.to_string());
    return 0;
  }
  check(q8.outside_unchanged() && qs.outside_unchanged(),
        "indexer_q_prepare wrote outside its outputs");
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float amax = 0;
      bool finite = std::isfinite(w.at({t, h}));
      for (int64_t d = 0; d < D; ++d) {
        finite &= bool(std::isfinite(q.at({t, h, d})));
        amax = std::max(amax, std::fabs(q.at({t, h, d})));
      }
      if (!finite) continue;
      float s = std::max(amax, 1e-4f) / 448.0f;
      if (mode == ScaleMode::kPowerOfTwo) {
        const uint32_t u = detail::float_bits(s);
        if ((u & 0x7FFFFFu) != 0) s = detail::bits_float(((u >> 23) + 1) << 23);
      }
      for (int64_t d = 0; d < D; ++d) {
        check(q8.at({t, h, d}).bits == float_to_e4m3(q.at({t, h, d}) / s),
              "indexer_q_prepare: q code");
      }
      const double want =
          double(w.at({t, h})) / std::sqrt(double(H)) / std::sqrt(double(D)) * double(s);
      const double got = qs.at({t, h});
      // The product is taken in fp32 in DeepSeek's order ((w * H^-0.5) * s) * D^-0.5
      // (docs/indexer.md): near FLT_MAX an intermediate may overflow where the exact product
      // does not, so only results well inside the range are compared.
      if (std::fabs(want) * std::max(1.0, double(s)) > 1e36) continue;
      // Likewise a subnormal intermediate loses bits the exact product keeps.
      if (std::fabs(w.at({t, h})) * std::min(1.0, double(s)) < 1e-30 && w.at({t, h}) != 0.0f)
        continue;
      check(std::fabs(got - want) <= 4e-7 * std::fabs(want) + 1e-44,
            "indexer_q_prepare: q_s[" + std::to_string(t) + ", " + std::to_string(h) +
                "] = " + std::to_string(got) + ", want " + std::to_string(want) + " (w " +
                std::to_string(w.at({t, h})) + ", s " + std::to_string(s) + ")");
    }
  }
  return 0;
}
