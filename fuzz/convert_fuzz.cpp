// Bulk row conversions (formats.hpp) on a random ISA path: any length and start offset, the
// scalar codecs' bits, and nothing written before or after the row.
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quantkv;
  using namespace quantkv::fuzz;
  FuzzInput in(data, size);
  in.pick_isa();
  const int64_t start = in.int_in(0, 7);
  int64_t n = in.int_in(0, 300);
  const int which = int(in.int_in(0, 2));
  if (which == 2) n &= ~int64_t(1);  // packed fp4: whole bytes
  // Exactly sized source (ASan sees a read past its end) with random codes.
  const int64_t src_bytes = which == 2 ? n / 2 : n;
  std::vector<uint8_t> src(size_t(start + src_bytes));
  for (auto& b : src) b = in.byte();
  const uint8_t* s = src.data() + start;
  constexpr int64_t kGuard = 8;
  switch (which) {
    case 0: {
      std::vector<uint16_t> dst(size_t(n + 2 * kGuard), 0xBEEF);
      convert_e4m3_to_bf16(s, dst.data() + kGuard, n);
      for (int64_t i = 0; i < n; ++i)
        check(dst[kGuard + i] == e4m3_to_bf16_bits(s[i]), "e4m3->bf16 bits");
      for (int64_t i = 0; i < kGuard; ++i)
        check(dst[i] == 0xBEEF && dst[kGuard + n + i] == 0xBEEF,
              "e4m3->bf16 wrote outside the row");
      break;
    }
    case 1: {
      std::vector<uint32_t> dst(size_t(n + 2 * kGuard), 0xDEADBEEFu);
      convert_e4m3_to_f32(s, reinterpret_cast<float*>(dst.data() + kGuard), n);
      for (int64_t i = 0; i < n; ++i) {
        check(dst[kGuard + i] == detail::float_bits(e4m3_to_float(s[i])), "e4m3->f32 bits");
      }
      for (int64_t i = 0; i < kGuard; ++i)
        check(dst[i] == 0xDEADBEEFu && dst[kGuard + n + i] == 0xDEADBEEFu,
              "e4m3->f32 wrote outside the row");
      break;
    }
    default: {
      std::vector<int8_t> dst(size_t(n + 2 * kGuard), 77);
      convert_e2m1_to_doubled_int8(s, dst.data() + kGuard, n);
      for (int64_t i = 0; i < n; ++i)
        check(dst[kGuard + i] == e2m1_to_doubled_int8(e2m1_get(s, i)), "e2m1->int8");
      for (int64_t i = 0; i < kGuard; ++i)
        check(dst[i] == 77 && dst[kGuard + n + i] == 77, "e2m1->int8 wrote outside the row");
      break;
    }
  }
  return 0;
}
