// Uses the installed quantkv through both of its interfaces (C++ headers and the C API) and
// checks the results; exit code 0 means the package works.
#include <cstdio>
#include <cstring>
#include <vector>

#include "quantkv/formats.hpp"
#include "quantkv/info.hpp"
#include "quantkv/paged_kv.hpp"
#include "quantkv/quantize.hpp"
#include "quantkv/quantkv.h"
#include "quantkv/scale_layout.hpp"
#include "quantkv/version.hpp"

namespace {
int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED %s\n", what);
    ++failures;
  }
}
}  // namespace

int main() {
  // Version: header macro, library, C API and the version CMake found must agree.
  check(std::strcmp(quantkv::version_string(), QUANTKV_VERSION_STRING) == 0, "version_string");
  check(std::strcmp(quantkv_version_string(), QUANTKV_FOUND_VERSION) == 0, "C API version");

  // Codecs.
  check(quantkv::float_to_e4m3(448.0f) == 0x7E, "float_to_e4m3(448)");
  check(quantkv::e2m1_to_float(quantkv::float_to_e2m1(-3.2f)) == -3.0f, "e2m1 round trip");

  // Scale layout round trip.
  std::vector<uint8_t> linear(3 * 5), back(3 * 5);
  for (std::size_t i = 0; i < linear.size(); ++i) linear[i] = uint8_t(i + 1);
  std::vector<uint8_t> swizzled(std::size_t(quantkv::swizzled_scale_elements(3, 5)));
  auto lin = quantkv::make_view<const uint8_t>(linear.data(), 3, 5);
  auto swz = quantkv::make_view<uint8_t>(swizzled.data(), quantkv::swizzled_scale_shape(3, 5));
  check(quantkv::linear_to_swizzled_scales(lin, swz).ok(), "linear_to_swizzled_scales");
  check(quantkv::swizzled_to_linear_scales(swz, quantkv::make_view(back.data(), 3, 5)).ok(),
        "swizzled_to_linear_scales");
  check(back == linear, "scale layout round trip");

  // An operation: MXFP8 of ones. amax / 448 rounds up to the scale 2^-8 (e8m0 119), so every
  // value is 256 (e4m3 0x78).
  std::vector<float> ones(2 * 32, 1.0f);
  std::vector<uint8_t> data(2 * 32), scales(std::size_t(quantkv::swizzled_scale_elements(2, 1)));
  const quantkv::Status st = quantkv::quantize_dynamic_block_scaled(
      quantkv::make_view<const float>(ones.data(), 2, 32), 1.0f, quantkv::BlockFormat::kMXFP8,
      quantkv::make_view(data.data(), 2, 32),
      quantkv::make_view(scales.data(), quantkv::swizzled_scale_shape(2, 1)), quantkv::Context{});
  check(st.ok(), "quantize_dynamic_block_scaled");
  check(data[0] == 0x78 && data[63] == 0x78 && scales[0] == 119 && scales[16] == 119,
        "MXFP8 values and scales");

  // The owning cache through the C API, including an error message.
  quantkv_cache_config_t cfg = quantkv_cache_config_default();
  cfg.num_blocks = 4;
  cfg.max_pages_per_seq = 4;
  quantkv_cache_t* cache = nullptr;
  check(quantkv_cache_create(&cfg, 7, &cache) == QUANTKV_OK, "quantkv_cache_create");
  check(quantkv_cache_reserve(cache, 0, 20) == QUANTKV_OK, "quantkv_cache_reserve");
  check(quantkv_cache_free_pages(cache) == 2, "free pages after reserving 2 of 4");
  check(quantkv_cache_set_cache_length(cache, 0, 33) == QUANTKV_OUT_OF_RANGE &&
            std::strstr(quantkv_last_error_message(), "length: 33") != nullptr,
        "error status and message");
  quantkv_cache_destroy(cache);

  std::printf("consumer: quantkv %s (build %s) OK, %d failure(s)\n", quantkv::version_string(),
              quantkv::build_info().compiler.c_str(), failures);
  return failures == 0 ? 0 : 1;
}
