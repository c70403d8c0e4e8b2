// The safetensors reader: the file is mapped read-only and only the header is parsed; tensor
// bytes are handed out as pointers into the mapping. Every malformed header is a named error
// (the fuzz target fuzz/safetensors_fuzz.cpp feeds it arbitrary bytes).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/out_of_memory.hpp"
#include "quantkv/checkpoint.hpp"

namespace quantkv {
namespace {

using json = nlohmann::json;

// The reference implementation's bound on the header (safetensors' MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

Status file_error(std::string_view label, const std::string& what) {
  return invalid_argument("safetensors " + std::string(label) + ": " + what);
}

// An unsigned JSON integer that fits int64_t.
bool as_extent(const json& v, int64_t* out) {
  if (!v.is_number_unsigned()) return false;
  const uint64_t u = v.get<uint64_t>();
  if (u > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  *out = int64_t(u);
  return true;
}

// numel(shape) * bits / 8, false when it overflows or is not a whole number of bytes.
bool tensor_bytes(const std::vector<int64_t>& shape, int bits, uint64_t* out, bool* whole) {
  uint64_t bit_count = uint64_t(bits);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bit_count, uint64_t(d), &bit_count)) return false;
  }
  *whole = bit_count % 8 == 0;
  *out = bit_count / 8;
  return *whole;
}

Status parse_entry(std::string_view label, const std::string& name, const json& entry,
                   const uint8_t* data, uint64_t data_bytes, SafetensorsTensor* t,
                   uint64_t* begin_out) {
  const std::string where = "tensor '" + name + "'";
  if (!entry.is_object()) return file_error(label, where + ": expected an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string()) {
    return file_error(label, where + ": missing string \"dtype\"");
  }
  if (shape == entry.end() || !shape->is_array()) {
    return file_error(label, where + ": missing array \"shape\"");
  }
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    return file_error(label, where + ": missing \"data_offsets\" [begin, end]");
  }
  t->name = name;
  t->dtype = dtype->get<std::string>();
  const int bits = safetensors_dtype_bits(t->dtype);
  if (bits == 0) return file_error(label, where + ": unknown dtype '" + t->dtype + "'");
  t->shape.clear();
  for (const json& d : *shape) {
    int64_t extent = 0;
    if (!as_extent(d, &extent)) {
      return file_error(label, where + ": shape entries must be non-negative integers");
    }
    t->shape.push_back(extent);
  }
  int64_t begin = 0, end = 0;
  if (!as_extent((*offsets)[0], &begin) || !as_extent((*offsets)[1], &end) || end < begin) {
    return file_error(label, where + ": data_offsets must be integers with begin <= end");
  }
  if (uint64_t(end) > data_bytes) {
    return file_error(label, where + ": data_offsets [" + std::to_string(begin) + ", " +
                                 std::to_string(end) + "] outside the data (" +
                                 std::to_string(data_bytes) + " bytes)");
  }
  uint64_t want = 0;
  bool whole = true;
  const bool fits = tensor_bytes(t->shape, bits, &want, &whole);
  if (!fits && !whole) {
    return file_error(label, where + ": its shape's element count x " + std::to_string(bits) +
                                 " bits (" + t->dtype + ") is not a whole number of bytes");
  }
  if (!fits || want != uint64_t(end - begin)) {
    return file_error(label,
                      where + ": data_offsets span " + std::to_string(end - begin) +
                          " bytes, shape x dtype needs " +
                          (want == 0 && !t->shape.empty() ? std::string("an overflowing count")
                                                          : std::to_string(want)));
  }
  t->data = data + begin;
  t->bytes = std::size_t(end - begin);
  *begin_out = uint64_t(begin);
  return Status::Ok();
}

Status parse_metadata(std::string_view label, const json& meta,
                      std::map<std::string, std::string>* out) {
  if (!meta.is_object()) return file_error(label, "\"__metadata__\" is not an object");
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (!it.value().is_string()) {
      return file_error(label, "\"__metadata__\" value of '" + it.key() + "' is not a string");
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
  return Status::Ok();
}

// Non-empty tensors sorted by offset must not share a byte.
Status check_overlaps(std::string_view label, std::vector<std::pair<uint64_t, std::size_t>> spans,
                      const std::vector<SafetensorsTensor>& tensors) {
  std::sort(spans.begin(), spans.end());
  uint64_t prev_end = 0;
  std::size_t prev = SIZE_MAX;
  for (const auto& [begin, i] : spans) {
    if (tensors[i].bytes == 0) continue;
    if (prev != SIZE_MAX && begin < prev_end) {
      return file_error(
          label, "tensor '" + tensors[i].name + "': overlaps tensor '" + tensors[prev].name + "'");
    }
    prev_end = begin + tensors[i].bytes;
    prev = i;
  }
  return Status::Ok();
}

struct Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
  }
};

}  // namespace

int safetensors_dtype_bits(std::string_view d) {
  static constexpr std::pair<std::string_view, int> kDtypes[] = {
      {"BOOL", 8},    {"U8", 8},          {"I8", 8},          {"F8_E4M3", 8}, {"F8_E5M2", 8},
      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F4", 4},      {"F6_E2M3", 6},
      {"F6_E3M2", 6}, {"U16", 16},        {"I16", 16},        {"F16", 16},    {"BF16", 16},
      {"U32", 32},    {"I32", 32},        {"F32", 32},        {"U64", 64},    {"I64", 64},
      {"F64", 64},    {"C64", 64}};
  for (const auto& [name, bits] : kDtypes) {
    if (d == name) return bits;
  }
  return 0;
}

std::size_t safetensors_dtype_size(std::string_view d) {
  const int bits = safetensors_dtype_bits(d);
  return bits % 8 == 0 ? std::size_t(bits / 8) : 0;
}

Status SafetensorsFile::parse(const uint8_t* bytes, std::size_t size, std::string_view label,
                              SafetensorsFile* out) {
  return catch_out_of_memory("SafetensorsFile::parse", [&]() -> Status {
    if (out == nullptr) return invalid_argument("out: pointer is null");
    if (size < 8) {
      return file_error(label, "truncated file: " + std::to_string(size) +
                                   " bytes, expected at least the 8-byte header length");
    }
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];  // little-endian
    if (header_bytes > size - 8) {
      return file_error(label, "header length " + std::to_string(header_bytes) +
                                   " runs past the end of the file (" + std::to_string(size) +
                                   " bytes)");
    }
    if (header_bytes > kMaxHeaderBytes) {
      return file_error(label, "header length " + std::to_string(header_bytes) +
                                   " exceeds the format's limit of 100000000 bytes");
    }
    const char* text = reinterpret_cast<const char*>(bytes + 8);
    const json header = json::parse(text, text + header_bytes, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) return file_error(label, "header is not valid JSON");
    if (!header.is_object()) return file_error(label, "header is not a JSON object");

    SafetensorsFile f;
    f.label_ = std::string(label);
    const uint8_t* data = bytes + 8 + header_bytes;
    const uint64_t data_bytes = size - 8 - header_bytes;
    std::vector<std::pair<uint64_t, std::size_t>> spans;
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        QUANTKV_RETURN_IF_ERROR(parse_metadata(label, it.value(), &f.metadata_));
        continue;
      }
      SafetensorsTensor t;
      uint64_t begin = 0;
      QUANTKV_RETURN_IF_ERROR(
          parse_entry(label, it.key(), it.value(), data, data_bytes, &t, &begin));
      spans.emplace_back(begin, f.tensors_.size());
      f.tensors_.push_back(std::move(t));
    }
    QUANTKV_RETURN_IF_ERROR(check_overlaps(label, std::move(spans), f.tensors_));
    std::sort(
        f.tensors_.begin(), f.tensors_.end(),
        [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.name < b.name; });
    *out = std::move(f);
    return Status::Ok();
  });
}

Status SafetensorsFile::open(const std::string& path, SafetensorsFile* out) {
  return catch_out_of_memory("SafetensorsFile::open", [&]() -> Status {
    if (out == nullptr) return invalid_argument("out: pointer is null");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return file_error(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return file_error(path, "not a regular file");
    }
    const std::size_t size = std::size_t(st.st_size);
    if (size < 8) {  // nothing worth mapping: parse reports the truncation
      uint8_t head[8] = {};
      const ssize_t got = pread(fd, head, size, 0);
      ::close(fd);
      return parse(head, got < 0 ? 0 : std::size_t(got), path, out);
    }
    auto mapping = std::make_shared<Mapping>();
    void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);  // a mapping stays valid after its descriptor is closed
    if (addr == MAP_FAILED)
      return file_error(path, std::string("cannot map: ") + std::strerror(errno));
    mapping->addr = addr;
    mapping->size = size;
    SafetensorsFile f;
    QUANTKV_RETURN_IF_ERROR(parse(static_cast<const uint8_t*>(addr), size, path, &f));
    f.mapping_ = std::move(mapping);
    *out = std::move(f);
    return Status::Ok();
  });
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

}  // namespace quantkv
