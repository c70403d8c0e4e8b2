// Scale layout converters (scale_layout.hpp): linear [R, Kb] (any strides) <-> 5-D swizzled.
// Wrong 5-D shapes, non-contiguous swizzled views, negative strides and null pointers must be
// rejected without a write; accepted calls put every scale where contract §4 says and zero the
// padding, and the round trip gives the scales back.
#include "fuzz_input.hpp"
#include "quantkv/scale_layout.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  const int64_t rows = in.int_in(0, 300), kb = in.int_in(0, 12);
  Buffer<uint8_t, 2> linear(in, {rows, kb}, /*padded=*/true);
  for (auto& b : linear.storage()) b = in.byte();
  auto want_shape = swizzled_scale_shape(rows, kb);
  Expectation ex;
  std::array<int64_t, 5> shape = want_shape;
  if (in.one_in(5)) {
    const int d = int(in.int_in(0, 4));
    shape[d] += in.pick<int64_t>({-1, 1, 128});
    if (shape[d] < 0) shape[d] = 1;
    ex.defect(shape != want_shape, "swizzled: wrong shape");
  }
  Buffer<uint8_t, 5> swz(in, shape, /*padded=*/in.one_in(4));
  ex.defect(!row_major(swz.view()), "swizzled: not contiguous");
  if (in.one_in(10) && linear.view().numel() > 0) {
    linear.view().strides[in.int_in(0, 1)] = -1;
    ex.defect(true, "linear: negative stride");
  }
  if (in.one_in(10) && swz.view().numel() > 0) {
    swz.view().data = nullptr;
    ex.defect(true, "swizzled: null");
  }
  const bool to_swizzled = in.coin();
  if (to_swizzled) {
    swz.fill_pattern(0xA5);
    swz.snapshot();
    linear.snapshot();
    const Status st = linear_to_swizzled_scales(linear.cview(), swz.view());
    check(linear.unchanged(), "linear_to_swizzled_scales wrote its input");
    if (!verify_status(st, ex, "linear_to_swizzled_scales")) {
      check(swz.unchanged(), "linear_to_swizzled_scales wrote after an error");
      return 0;
    }
    check(swz.outside_unchanged(), "linear_to_swizzled_scales wrote outside its view");
    std::vector<uint8_t> expect(size_t(swz.view().numel()), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < kb; ++k) expect[swizzled_scale_offset(r, k, kb)] = linear.at({r, k});
    check(std::equal(expect.begin(), expect.end(), swz.view().data), "swizzled contents");
    // And back.
    Buffer<uint8_t, 2> back(in, {rows, kb}, true);
    back.fill_pattern(0x5A);
    check(swizzled_to_linear_scales(swz.cview(), back.view()).ok(), "round trip rejected");
    linear.for_each(
        [&](const std::array<int64_t, 2>& i) { check(back.at(i) == linear.at(i), "round trip"); });
  } else {
    for (auto& b : swz.storage()) b = in.byte();
    linear.fill_pattern(0x5A);
    linear.snapshot();
    swz.snapshot();
    const Status st = swizzled_to_linear_scales(swz.cview(), linear.view());
    check(swz.unchanged(), "swizzled_to_linear_scales wrote its input");
    if (!verify_status(st, ex, "swizzled_to_linear_scales")) {
      check(linear.unchanged(), "swizzled_to_linear_scales wrote after an error");
      return 0;
    }
    check(linear.outside_unchanged(), "swizzled_to_linear_scales wrote outside its view");
    linear.for_each([&](const std::array<int64_t, 2>& i) {
      check(linear.at(i) == swz.view().data[swizzled_scale_offset(i[0], i[1], kb)],
            "linear contents");
    });
  }
  return 0;
}
