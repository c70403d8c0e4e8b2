// Helpers of the GPU tests (tests/cuda_*_test.cpp): the "no CUDA device" skip, typed device
// arrays, and a device mirror of a host PagedKVCache. Plain C++ over include/quantkv/cuda.hpp.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "quantkv/cuda.hpp"
#include "quantkv/info.hpp"
#include "quantkv/paged_kv.hpp"

namespace quantkv::testing {
// QUANTKV_REQUIRE_CUDA_DEVICE=1 in the environment (scripts/gpu_check.sh sets it on the GPU
// machine): a missing device fails the GPU tests instead of skipping them, so a run that
// verified nothing cannot look green.
inline bool cuda_device_required() {
  const char* v = std::getenv("QUANTKV_REQUIRE_CUDA_DEVICE");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}
}  // namespace quantkv::testing

// Skips the test, visibly, unless a CUDA device is usable (fails instead when one is required).
#define QUANTKV_REQUIRE_CUDA_DEVICE()                                                            \
  do {                                                                                           \
    std::string quantkv_why_;                                                                    \
    if (::quantkv::cuda_device_count(&quantkv_why_) <= 0) {                                      \
      if (::quantkv::testing::cuda_device_required()) {                                          \
        GTEST_FAIL() << "no CUDA device (QUANTKV_REQUIRE_CUDA_DEVICE is set): " << quantkv_why_; \
      }                                                                                          \
      GTEST_SKIP() << "no CUDA device: " << quantkv_why_;                                        \
    }                                                                                            \
  } while (0)

namespace quantkv::testing {

// A device copy of a host vector; download() brings it back.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) : buf_(host.size() * sizeof(T) + 16) {
    EXPECT_TRUE(buf_.ok()) << buf_.status().to_string();
    if (buf_.ok()) {
      const Status s = buf_.upload(host.data(), host.size() * sizeof(T));
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    size_ = host.size();
  }
  T* get() const { return buf_.as<T>(); }
  std::size_t size() const { return size_; }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    const Status s = buf_.download(host.data(), size_ * sizeof(T));
    EXPECT_TRUE(s.ok()) << s.to_string();
    return host;
  }

 private:
  cuda::DeviceBuffer buf_;
  std::size_t size_ = 0;
};

// A device view with the same shape and strides as a host view.
template <typename T, int Rank>
TensorView<T, Rank> on_device(T* device_data, const TensorView<T, Rank>& like) {
  return {device_data, like.shape, like.strides};
}

// Device mirror of a host cache: blocks, scales, cache lengths, lookup table.
class DeviceCache {
 public:
  explicit DeviceCache(PagedKVCache& host)
      : blocks_(host.raw_blocks()),
        scales_(host.raw_scales()),
        lengths_(host.raw_cache_lengths()),
        table_(host.raw_lookup_table()),
        host_view_(host.view()) {}
  // The collection with device pointers (same geometry as the host view).
  PagedKVCacheCollection view() const {
    PagedKVCacheCollection v = host_view_;
    v.blocks = blocks_.get();
    v.scales = host_view_.scales ? scales_.get() : nullptr;
    v.cache_lengths = on_device<const uint32_t, 1>(lengths_.get(), host_view_.cache_lengths);
    v.lookup_table = on_device<const uint32_t, 2>(table_.get(), host_view_.lookup_table);
    return v;
  }
  // The host copies the CUDA entry points validate.
  cuda::HostRagged host_ragged(TensorView<const uint32_t, 1> host_offsets) const {
    return {host_offsets, host_view_.cache_lengths, host_view_.lookup_table};
  }
  std::vector<uint8_t> blocks() const { return blocks_.download(); }
  std::vector<float> scales() const { return scales_.download(); }

 private:
  DeviceArray<uint8_t> blocks_;
  DeviceArray<float> scales_;
  DeviceArray<uint32_t> lengths_;
  DeviceArray<uint32_t> table_;
  PagedKVCacheCollection host_view_;
};

// A non-blocking stream of its own (cuda::stream_create) for ctx.cuda_stream, destroyed with
// the object. Uploads and downloads of DeviceArray stay synchronous on the legacy stream, so
// a test on this stream must cuda::synchronize(ctx) before it downloads results.
class TestStream {
 public:
  TestStream() {
    const Status s = cuda::stream_create(&stream_);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ~TestStream() {
    if (stream_ != nullptr) (void)cuda::stream_destroy(stream_);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  Context context() const {
    Context ctx;
    ctx.cuda_stream = stream_;
    return ctx;
  }

 private:
  void* stream_ = nullptr;
};

// Asserts a status is OK, printing it otherwise.
#define QUANTKV_ASSERT_OK(expr)                             \
  do {                                                      \
    const ::quantkv::Status quantkv_s_ = (expr);            \
    ASSERT_TRUE(quantkv_s_.ok()) << quantkv_s_.to_string(); \
  } while (0)

}  // namespace quantkv::testing
