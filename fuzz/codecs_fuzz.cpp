// Scalar codecs of contract §1 against brute-force oracles: for any float bit pattern the encoder
// returns the nearest code (ties to the even code, saturation as specified), and decoding then
// encoding any code gives the code back.
#include <cmath>
#include <limits>

#include "fuzz_input.hpp"

namespace quantkv::fuzz {
namespace {

bool is_nan(float x) { return x != x; }

// Nearest of `count` non-negative magnitudes (codes 0..count-1, increasing), ties to the even
// code; beyond the largest, the largest (saturation).
template <typename Decode>
uint32_t nearest_code(double a, uint32_t count, Decode decode) {
  if (a >= double(decode(count - 1))) return count - 1;
  uint32_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (uint32_t c = 0; c < count; ++c) {
    const double err = std::fabs(double(decode(c)) - a);
    if (err < best_err || (err == best_err && (c & 1u) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

void check_e4m3(float x) {
  const uint8_t got = float_to_e4m3(x);
  if (is_nan(x)) return check(got == 0x7F, "e4m3(NaN) != 0x7F");
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  const uint32_t want = nearest_code(a, 0x7F, [](uint32_t c) { return e4m3_to_float(uint8_t(c)); });
  check(got == (sign | want), "e4m3 encode of " + std::to_string(x) + " gave " +
                                  std::to_string(got) + ", want " + std::to_string(sign | want));
}

void check_e2m1(float x) {
  const uint8_t got = float_to_e2m1(x);
  if (is_nan(x)) return check(got == 0x7, "e2m1(NaN) != 7");
  const uint8_t sign = std::signbit(x) ? 0x8 : 0;
  const uint32_t want =
      nearest_code(std::fabs(double(x)), 8, [](uint32_t c) { return e2m1_to_float(uint8_t(c)); });
  check(got == (sign | want), "e2m1 encode of " + std::to_string(x));
}

void check_e8m0(float x) {
  const uint8_t got = float_to_e8m0(x);
  if (is_nan(x)) return check(got == 0xFF, "e8m0(NaN) != 0xFF");
  const double a = std::fabs(double(x));
  // Smallest power of two >= a, saturated to 2^127 (0xFE); 2^-127 (code 0) is the smallest.
  uint32_t want = 0;
  while (want < 0xFE && std::ldexp(1.0, int(want) - 127) < a) ++want;
  check(got == want, "e8m0 encode of " + std::to_string(x) + " gave " + std::to_string(got) +
                         ", want " + std::to_string(want));
}

// A 16-bit format: the encoded value is no farther from x than either neighbouring code, and a
// tie goes to the even code. `to_float` decodes, `max_finite` is the largest finite code.
template <typename Encode, typename Decode>
void check_nearest16(float x, Encode encode, Decode decode, uint16_t max_finite, const char* name) {
  const uint16_t got = encode(x);
  if (is_nan(x)) return check(got == 0x7FFF, std::string(name) + "(NaN) != 0x7FFF");
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t mag = uint16_t(got & 0x7FFF);
  check((got & 0x8000) == sign, std::string(name) + ": sign lost");
  const double a = std::fabs(double(x));
  const uint16_t inf = uint16_t(max_finite + 1);
  // Distance to a code, treating the infinity code as the next binade step past the maximum.
  auto value = [&](uint16_t c) {
    if (c == inf)
      return 2.0 * double(decode(max_finite)) - double(decode(uint16_t(max_finite - 1)));
    return double(decode(c));
  };
  check(mag <= inf, std::string(name) + ": encoded a finite value to NaN");
  const double err = std::fabs(value(mag) - a);
  if (mag > 0) {
    const double below = std::fabs(value(uint16_t(mag - 1)) - a);
    check(err < below || (err == below && (mag & 1) == 0),
          std::string(name) + ": lower code is nearer for " + std::to_string(x));
  }
  if (mag < inf) {
    const double above = std::fabs(value(uint16_t(mag + 1)) - a);
    check(err < above || (err == above && (mag & 1) == 0),
          std::string(name) + ": upper code is nearer for " + std::to_string(x));
  }
}

void check_roundtrips(uint8_t b, uint16_t h) {
  if ((b & 0x7F) != 0x7F) check(float_to_e4m3(e4m3_to_float(b)) == b, "e4m3 roundtrip");
  if (b != 0xFF) check(float_to_e8m0(e8m0_to_float(b)) == b, "e8m0 roundtrip");
  check(float_to_e2m1(e2m1_to_float(b & 0xF)) == (b & 0xF), "e2m1 roundtrip");
  check(e2m1_to_doubled_int8(b & 0xF) == int8_t(2.0f * e2m1_to_float(b & 0xF)), "doubled e2m1");
  check(e4m3_to_bf16_bits(b) == uint16_t(detail::float_bits(e4m3_to_float(b)) >> 16) &&
            (is_nan(e4m3_to_float(b)) || bf16_to_float(e4m3_to_bf16_bits(b)) == e4m3_to_float(b)),
        "e4m3 -> bf16 is exact");
  const uint8_t packed[1] = {e2m1_pack(b & 0xF, b >> 4)};
  check(e2m1_get(packed, 0) == (b & 0xF) && e2m1_get(packed, 1) == (b >> 4), "e2m1 pack order");
  if ((h & 0x7FFF) <= 0x7F80) check(float_to_bf16(bf16_to_float(h)) == h, "bf16 roundtrip");
  if ((h & 0x7FFF) <= 0x7C00) check(float_to_fp16(fp16_to_float(h)) == h, "fp16 roundtrip");
}

}  // namespace
}  // namespace quantkv::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  while (in.remaining() >= 4) {
    // Raw bit patterns, plus values near the format grids (where rounding is decided).
    const float x = in.coin() ? in.any_float() : float(in.int_in(-70000, 70000)) * 0.125f;
    check_e4m3(x);
    check_e2m1(x);
    check_e8m0(x);
    check_nearest16(x, float_to_bf16, bf16_to_float, 0x7F7F, "bf16");
    check_nearest16(x, float_to_fp16, fp16_to_float, 0x7BFF, "fp16");
    check_roundtrips(in.byte(), uint16_t(in.u32()));
  }
  return 0;
}
