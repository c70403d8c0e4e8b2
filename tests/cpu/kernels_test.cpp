// The CPU kernel table (src/cpu/kernels.hpp): one table per ISA level, complete, and the one
// the drivers see follows the forced level.
#include "cpu/kernels.hpp"

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace quantkv {
namespace {

TEST(KernelTable, EveryLevelHasACompleteTableOfItsOwn) {
  for (IsaLevel level : testing::supported_isa_levels()) {
    const cpu::KernelTable& t = cpu::kernels_for(level);
    SCOPED_TRACE(isa_level_name(level));
    EXPECT_EQ(t.level, level);
    EXPECT_NE(t.convert.e4m3_to_bf16, nullptr);
    EXPECT_NE(t.convert.e4m3_to_f32, nullptr);
    EXPECT_NE(t.convert.e2m1_to_doubled_int8, nullptr);
    EXPECT_NE(t.indexer.score_tile, nullptr);
    EXPECT_NE(t.indexer.filter_at_least, nullptr);
    EXPECT_NE(t.qkv.fp4_pair, nullptr);
    EXPECT_NE(t.qkv.mxfp8_pair, nullptr);
    EXPECT_NE(t.qkv.fp4_bf16_pair, nullptr);
    // On x86 the weight-only fp4 kernel of a level follows its MXFP8 kernel (the same bf16
    // order); the aarch64 levels keep the scalar weight-only kernel.
    if (level == IsaLevel::kAvx2 || level == IsaLevel::kAvx512) {
      EXPECT_EQ(t.qkv.fp4_bf16_pair == cpu::kernels_for(IsaLevel::kAvx2).qkv.fp4_bf16_pair,
                t.qkv.mxfp8_pair == cpu::kernels_for(IsaLevel::kAvx2).qkv.mxfp8_pair);
    }
    // The row quantisers are vectorised for x86 only: the scalar and aarch64 levels leave them
    // to the drivers' scalar recipes.
    const bool vector = level == IsaLevel::kAvx2 || level == IsaLevel::kAvx512;
    EXPECT_EQ(t.quantize.block_f32 != nullptr, vector);
    EXPECT_EQ(t.quantize.block_bf16 != nullptr, vector);
    EXPECT_EQ(t.quantize.token_f32 != nullptr, vector);
    EXPECT_EQ(t.quantize.token_bf16 != nullptr, vector);
    // The weight packer's vector repack exists for AVX-512 only.
    EXPECT_EQ(t.qkv.repack_fp4_half != nullptr, level == IsaLevel::kAvx512);
    EXPECT_EQ(t.qkv.repack_mxfp8_half != nullptr, level == IsaLevel::kAvx512);
  }
}

TEST(KernelTable, DriversSeeTheForcedLevel) {
  for (IsaLevel level : testing::supported_isa_levels()) {
    testing::ScopedIsa isa(level);
    EXPECT_EQ(&cpu::kernels(), &cpu::kernels_for(level)) << isa_level_name(level);
    EXPECT_EQ(cpu::kernels().level, level);
  }
  // A level without its own variant inherits the slower level's: AVX2 has no top-k filter.
  if (max_supported_isa() != IsaLevel::kScalar) {
    EXPECT_EQ(cpu::kernels_for(IsaLevel::kAvx2).indexer.filter_at_least,
              cpu::kernels_for(IsaLevel::kScalar).indexer.filter_at_least);
  }
  // A level the CPU lacks (above its best, or of the other architecture) gives the best level's
  // table.
  for (IsaLevel level : kAllIsaLevels) {
    if (isa_level_supported(level)) continue;
    EXPECT_EQ(&cpu::kernels_for(level), &cpu::kernels_for(max_supported_isa()))
        << isa_level_name(level);
  }
}

// Each level brings a kernel of its own for at least one of the two operations (neon-dotprod, for
// one, keeps neon's indexer and brings an SDOT FP4 GEMM).
TEST(KernelTable, LevelsDifferInTheirKernels) {
  const std::vector<IsaLevel> levels = testing::supported_isa_levels();
  for (std::size_t i = 1; i < levels.size(); ++i) {
    const cpu::KernelTable& t = cpu::kernels_for(levels[i]);
    const cpu::KernelTable& slower = cpu::kernels_for(levels[i - 1]);
    EXPECT_TRUE(t.indexer.score_tile != slower.indexer.score_tile ||
                t.qkv.fp4_pair != slower.qkv.fp4_pair || t.qkv.mxfp8_pair != slower.qkv.mxfp8_pair)
        << isa_level_name(levels[i]);
  }
}

#if defined(QUANTKV_X86_KERNELS)
// The avx512 level is AVX-512 F/BW/VL/DQ/VNNI; its vdpbf16ps kernels (the indexer's score tile,
// the MXFP8 and weight-only fp4 pair kernels) only where the CPU has AVX512_BF16; otherwise the
// indexer keeps the AVX2 score tile and the bf16-order GEMM modes run the AVX-512 fma replay
// (Ice Lake / Cascade Lake servers). The int8 GEMM is the level's own either way.
TEST(KernelTable, Avx512TakesItsBf16KernelsOnlyWithAvx512Bf16) {
  if (!isa_level_supported(IsaLevel::kAvx512)) GTEST_SKIP() << "no avx512 level on this CPU";
  const cpu::KernelTable& t = cpu::kernels_for(IsaLevel::kAvx512);
  const cpu::KernelTable& avx2 = cpu::kernels_for(IsaLevel::kAvx2);
  EXPECT_NE(t.qkv.fp4_pair, avx2.qkv.fp4_pair);
  EXPECT_NE(t.indexer.filter_at_least, avx2.indexer.filter_at_least);
  if (cpu_features().avx512bf16) {
    EXPECT_NE(t.indexer.score_tile, avx2.indexer.score_tile);
  } else {
    EXPECT_EQ(t.indexer.score_tile, avx2.indexer.score_tile);
    EXPECT_EQ(t.qkv.mxfp8_pair, &cpu::qkv_mxfp8_pair_avx512);
    EXPECT_EQ(t.qkv.fp4_bf16_pair, &cpu::qkv_fp4_bf16_pair_avx512);
  }
}
#endif

}  // namespace
}  // namespace quantkv
