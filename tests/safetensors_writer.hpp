// A minimal safetensors writer for the tests (independent of the library's reader: the JSON
// header is assembled by hand), a temporary file and a temporary directory that remove
// themselves.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
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

// A file of `header` (its 8-byte length first) and `data_bytes` bytes of 0x11.
inline std::vector<uint8_t> with_header(const std::string& header, std::size_t data_bytes) {
  std::vector<uint8_t> file(8 + header.size() + data_bytes, 0x11);
  for (int i = 0; i < 8; ++i) file[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  std::memcpy(file.data() + 8, header.data(), header.size());
  return file;
}

// One NVFP4 compressed-tensors projection `p` of n rows and k columns (constant codes).
inline std::vector<StEntry> ct_shard(const std::string& p, int64_t n, int64_t k) {
  return {
      {p + ".weight_packed", "U8", {n, k / 2}, std::vector<uint8_t>(std::size_t(n * k / 2), 0x21)},
      {p + ".weight_scale",
       "F8_E4M3",
       {n, k / 16},
       std::vector<uint8_t>(std::size_t(n * k / 16), 0x38)},
      st_f32(p + ".weight_global_scale", 100.0f)};
}

// L.q_proj, L.k_proj, L.v_proj of 16 rows each (entries 0-2 q, 3-5 k, 6-8 v).
inline std::vector<StEntry> ct_qkv(int64_t k) {
  std::vector<StEntry> all;
  for (const char* s : {"L.q_proj", "L.k_proj", "L.v_proj"})
    for (StEntry& e : ct_shard(s, 16, k)) all.push_back(std::move(e));
  return all;
}

// A sharded checkpoint's index, written by hand: {"metadata": ..., "weight_map": {name: file}}.
inline std::string index_json(const std::vector<std::pair<std::string, std::string>>& map) {
  std::string s = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (std::size_t i = 0; i < map.size(); ++i) {
    s += (i ? ", \"" : "\"") + map[i].first + "\": \"" + map[i].second + "\"";
  }
  return s + "}}";
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

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/quantkv_ckpt_XXXXXX";
    if (mkdtemp(path_.data()) == nullptr) path_.clear();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `bytes` to path()/name; returns the file's path.
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return p;
  }
  std::string write(const std::string& name, const std::string& text) const {
    return write(name, std::vector<uint8_t>(text.begin(), text.end()));
  }
  // `entries` round robin over `n` shards model-0000i-of-0000n.safetensors (so one
  // projection's tensors span files) and model.safetensors.index.json; returns the map.
  std::vector<std::pair<std::string, std::string>> write_sharded(
      const std::vector<StEntry>& entries, int n) const {
    std::vector<std::vector<StEntry>> shards(static_cast<std::size_t>(n));
    std::vector<std::pair<std::string, std::string>> map;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const int s = int(i % std::size_t(n));
      shards[std::size_t(s)].push_back(entries[i]);
      map.emplace_back(entries[i].name, shard_name(s, n));
    }
    for (int s = 0; s < n; ++s) write(shard_name(s, n), write_safetensors(shards[std::size_t(s)]));
    write("model.safetensors.index.json", index_json(map));
    return map;
  }
  static std::string shard_name(int s, int n) {
    return "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(n) + ".safetensors";
  }

 private:
  std::string path_;
};

}  // namespace quantkv::testing
