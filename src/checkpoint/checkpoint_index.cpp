// SafetensorsCheckpoint: one .safetensors file, or a Hugging Face sharded checkpoint (several
// files and model.safetensors.index.json, whose "weight_map" names each tensor's shard). The
// index is parsed with nlohmann-json (no exceptions); shards are opened on first use, under a
// mutex, and kept for the life of the checkpoint's copies.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/out_of_memory.hpp"
#include "quantkv/checkpoint.hpp"

namespace quantkv {

struct SafetensorsCheckpoint::State {
  std::string label;  // the file, or the index
  // One file:
  std::unique_ptr<SafetensorsFile> file;
  // Shards: tensor name -> index into shard_names; the shards opened so far.
  std::string dir;  // the index's directory, with a trailing '/' (empty: the working directory)
  std::map<std::string, std::size_t, std::less<>> weight_map;
  std::vector<std::string> shard_names;
  mutable std::mutex mutex;
  mutable std::vector<std::unique_ptr<SafetensorsFile>> shards;  // null until opened
};

namespace {

using json = nlohmann::json;

// An index is a few MB even for the largest models; the headers' limit bounds it too.
constexpr std::uintmax_t kMaxIndexBytes = 100'000'000;

Status index_error(const std::string& path, const std::string& what) {
  return invalid_argument("checkpoint index " + path + ": " + what);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A shard's name must stay inside the index's directory: relative, no ".." component.
bool is_inner_file_name(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  std::size_t begin = 0;
  while (begin <= name.size()) {
    const std::size_t end = std::min(name.find('/', begin), name.size());
    const std::string_view part(name.data() + begin, end - begin);
    if (part == ".." || (end == name.size() && part.empty())) return false;
    begin = end + 1;
  }
  return true;
}

// The file a directory stands for (contract of SafetensorsCheckpoint::open).
Status resolve_directory(const std::string& dir, std::string* out) {
  const std::string base = ends_with(dir, "/") ? dir : dir + "/";
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"}) {
    if (is_regular(base + name)) {
      *out = base + name;
      return Status::Ok();
    }
  }
  std::vector<std::string> indexes, files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_regular(base + name)) continue;
    if (ends_with(name, ".safetensors.index.json")) indexes.push_back(name);
    if (ends_with(name, ".safetensors")) files.push_back(name);
  }
  if (ec) return invalid_argument("checkpoint directory " + dir + ": cannot list: " + ec.message());
  if (indexes.size() == 1 || (indexes.empty() && files.size() == 1)) {
    *out = base + (indexes.empty() ? files[0] : indexes[0]);
    return Status::Ok();
  }
  return invalid_argument("checkpoint directory " + dir +
                          ": expected model.safetensors.index.json, model.safetensors, or exactly "
                          "one *.safetensors.index.json or *.safetensors file, found " +
                          std::to_string(indexes.size()) + " index files and " +
                          std::to_string(files.size()) + " .safetensors files");
}

Status read_text(const std::string& path, std::string* out) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return index_error(path, "cannot open: " + ec.message());
  if (size > kMaxIndexBytes) {
    return index_error(path, std::to_string(size) + " bytes exceeds the limit of 100000000 bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return index_error(path, std::string("cannot open: ") + std::strerror(errno));
  out->assign(std::size_t(size), '\0');
  in.read(out->data(), std::streamsize(size));
  if (std::size_t(in.gcount()) != size) return index_error(path, "cannot read the whole file");
  return Status::Ok();
}

Status parse_index(const std::string& path, SafetensorsCheckpoint::State* st) {
  std::string text;
  QUANTKV_RETURN_IF_ERROR(read_text(path, &text));
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return index_error(path, "not valid JSON");
  if (!index.is_object()) return index_error(path, "not a JSON object");
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) {
    return index_error(path, "missing object \"weight_map\" {tensor name: shard file}");
  }
  std::unordered_map<std::string, std::size_t> shard_ids;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string()) {
      return index_error(path, "weight_map entry '" + it.key() + "' is not a string");
    }
    const std::string& shard = it.value().get_ref<const std::string&>();
    if (!is_inner_file_name(shard)) {
      return index_error(path, "weight_map entry '" + it.key() + "' names '" + shard +
                                   "', expected a file name inside the index's directory");
    }
    const auto [pos, added] = shard_ids.emplace(shard, st->shard_names.size());
    if (added) st->shard_names.push_back(shard);
    st->weight_map.emplace(it.key(), pos->second);
  }
  const std::size_t slash = path.rfind('/');
  st->dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  st->shards.resize(st->shard_names.size());
  return Status::Ok();
}

}  // namespace

Status SafetensorsCheckpoint::open(const std::string& path, SafetensorsCheckpoint* out) {
  return catch_out_of_memory("SafetensorsCheckpoint::open", [&]() -> Status {
    if (out == nullptr) return invalid_argument("out: pointer is null");
    std::string file = path;
    if (is_directory(path)) QUANTKV_RETURN_IF_ERROR(resolve_directory(path, &file));
    auto st = std::make_shared<State>();
    st->label = file;
    if (ends_with(file, ".json")) {
      QUANTKV_RETURN_IF_ERROR(parse_index(file, st.get()));
    } else {
      st->file = std::make_unique<SafetensorsFile>();
      QUANTKV_RETURN_IF_ERROR(SafetensorsFile::open(file, st->file.get()));
    }
    out->state_ = std::move(st);
    return Status::Ok();
  });
}

SafetensorsCheckpoint SafetensorsCheckpoint::of_file(SafetensorsFile file) {
  SafetensorsCheckpoint c;
  c.state_ = std::make_shared<State>();
  c.state_->label = file.label();
  c.state_->file = std::make_unique<SafetensorsFile>(std::move(file));
  return c;
}

const std::string& SafetensorsCheckpoint::label() const {
  static const std::string kNone = "(no checkpoint)";
  return state_ ? state_->label : kNone;
}

bool SafetensorsCheckpoint::sharded() const { return state_ && !state_->file; }

bool SafetensorsCheckpoint::contains(std::string_view name) const {
  if (!state_) return false;
  if (state_->file) return state_->file->find(name) != nullptr;
  return state_->weight_map.find(name) != state_->weight_map.end();
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  if (!state_) return names;
  if (state_->file) {
    for (const SafetensorsTensor& t : state_->file->tensors()) names.push_back(t.name);
  } else {
    for (const auto& [name, shard] : state_->weight_map) names.push_back(name);
  }
  return names;
}

Status SafetensorsCheckpoint::tensor(std::string_view name, const SafetensorsTensor** out) const {
  return catch_out_of_memory("SafetensorsCheckpoint::tensor", [&]() -> Status {
    if (out == nullptr) return invalid_argument("out: pointer is null");
    const std::string where = "tensor '" + std::string(name) + "': ";
    if (!state_) return invalid_argument(where + "missing: the checkpoint is not open");
    if (state_->file) {
      *out = state_->file->find(name);
      return *out != nullptr ? Status::Ok()
                             : invalid_argument(where + "missing from " + state_->label);
    }
    const auto it = state_->weight_map.find(name);
    if (it == state_->weight_map.end()) {
      return invalid_argument(where + "missing from the weight_map of " + state_->label);
    }
    const std::string& shard_name = state_->shard_names[it->second];
    const SafetensorsFile* shard = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      std::unique_ptr<SafetensorsFile>& slot = state_->shards[it->second];
      if (!slot) {
        auto f = std::make_unique<SafetensorsFile>();
        const Status s = SafetensorsFile::open(state_->dir + shard_name, f.get());
        if (!s.ok()) {
          return Status(s.code(), where + "weight_map of " + state_->label + " names shard '" +
                                      shard_name + "': " + s.message());
        }
        slot = std::move(f);
      }
      shard = slot.get();
    }
    *out = shard->find(name);
    if (*out == nullptr) {
      return invalid_argument(where + "weight_map of " + state_->label + " puts it in '" +
                              shard_name + "', which does not hold it");
    }
    return Status::Ok();
  });
}

}  // namespace quantkv
