// Status, tensor views, ISA selection.
#include <gtest/gtest.h>

#include "core/view_checks.hpp"
#include "quantkv/cpu_features.hpp"
#include "quantkv/status.hpp"
#include "quantkv/tensor.hpp"
#include "test_util.hpp"

namespace quantkv {
namespace {

TEST(Tensor, CheckShapeNamesArgumentExpectedAndActual) {
  float buf[5 * 64] = {};
  const auto q = make_view<const float>(buf, 5, 64);
  EXPECT_TRUE(check_shape("q", "[T, H]", q, {5, kAnyExtent}).ok());
  TensorView<const float, 3> q3 = make_view<const float>(buf, 5, 8, 8);
  const Status s = check_shape("q", "[T, H, D]", q3, {5, 64, kAnyExtent});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "q: expected shape [T, H, D] = [5, 64, *], got shape [5, 8, 8]");
}

TEST(Tensor, NullDataAndStridesAreRejected) {
  TensorView<const float, 2> v = make_view<const float>(nullptr, 2, 3);
  EXPECT_NE(check_shape("x", "[M, K]", v, {kAnyExtent, kAnyExtent})
                .message()
                .find("x: data pointer is null"),
            std::string::npos);
  TensorView<const float, 2> empty = make_view<const float>(nullptr, 0, 3);
  EXPECT_TRUE(check_shape("x", "[M, K]", empty, {kAnyExtent, kAnyExtent}).ok());
  float buf[16] = {};
  TensorView<const float, 2> strided{buf, {2, 3}, {8, 2}};
  EXPECT_TRUE(check_shape("x", "[M, K]", strided, {2, 3}).ok());
  EXPECT_NE(check_contiguous("x", "[M, K]", strided, {2, 3}).message().find("contiguous"),
            std::string::npos);
  EXPECT_EQ(strided(1, 2), buf[12]);
}

TEST(CpuFeatures, LevelsParseAndUnsupportedLevelsAreRefused) {
  IsaLevel l;
  EXPECT_TRUE(parse_isa_level("avx2", &l).ok());
  EXPECT_EQ(l, IsaLevel::kAvx2);
  EXPECT_NE(parse_isa_level("sse9", &l).message().find("isa: expected one of"), std::string::npos);
  EXPECT_TRUE(set_isa_level(IsaLevel::kScalar).ok());
  EXPECT_EQ(active_isa(), IsaLevel::kScalar);
  EXPECT_TRUE(set_isa_level(max_supported_isa()).ok());
  if (max_supported_isa() != IsaLevel::kAvx512) {
    EXPECT_EQ(set_isa_level(IsaLevel::kAvx512).code(), StatusCode::kUnimplemented);
  }
#if defined(QUANTKV_X86_KERNELS)
  // The avx512 level asks for F/BW/VL/DQ/VNNI, not BF16 (the kernel table adds the vdpbf16ps
  // kernels where the CPU has it).
  const CpuFeatures& f = cpu_features();
  if (isa_level_supported(IsaLevel::kAvx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
      f.avx512vnni) {
    EXPECT_TRUE(isa_level_supported(IsaLevel::kAvx512)) << "avx512bf16: " << f.avx512bf16;
  }
#endif
  // The kernel table's fallbacks are checked in kernels_test.cpp.
}

TEST(CpuFeatures, XcrAndCpuidAgreeOnThisMachine) {
  const CpuFeatures& f = cpu_features();
  // AVX-512 sub-features imply the foundation; AVX2 implies AVX.
  if (f.avx512vnni || f.avx512bf16 || f.avx512bw) {
    EXPECT_TRUE(f.avx512f);
  }
  if (f.avx2) {
    EXPECT_TRUE(f.avx);
  }
  std::printf("cpu: %s, best isa %s\n", f.brand.c_str(), isa_level_name(max_supported_isa()));
}

}  // namespace
}  // namespace quantkv
