// A minimal safetensors writer for the tests (independent of the library's reader: the JSON
// header is assembled by hand), and a temporary file that removes itself.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace quantkv::testing {

struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline StEntry st_f32(const std::string& name, float v) {
  StEntry e{name, "F32", {1}, std::vector<uint8_t>(4)};
  std::memcpy(e.bytes.data(), &v, 4);
  return e;
}

// 8-byte little-endian header length, the JSON header padded with spaces to 8 bytes (as the
// reference writer does), then the tensors back to back in the given order.
inline std::vector<uint8_t> write_safetensors(const std::vector<StEntry>& entries) {
  std::string header = "{";
  uint64_t offset = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const StEntry& e = entries[i];
    if (i > 0) header += ',';
    header += "\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[";
    for (std::size_t d = 0; d < e.shape.size(); ++d) {
      if (d > 0) header += ',';
      header += std::to_string(e.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + e.bytes.size()) + "]}";
    offset += e.bytes.size();
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::vector<uint8_t> file(8 + header.size() + offset);
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) file[i] = uint8_t(len >> (8 * i));
  std::memcpy(file.data() + 8, header.data(), header.size());
  std::size_t at = 8 + header.size();
  for (const StEntry& e : entries) {
    if (!e.bytes.empty()) std::memcpy(file.data() + at, e.bytes.data(), e.bytes.size());
    at += e.bytes.size();
  }
  return file;
}

// A file under $TMPDIR (or /tmp) holding `bytes`, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/quantkv_st_XXXXXX";
    const int fd = mkstemp(path_.data());
    if (fd >= 0) {
      std::size_t done = 0;
      while (done < bytes.size()) {
        const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (w <= 0) break;
        done += std::size_t(w);
      }
      ::close(fd);
    }
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace quantkv::testing
