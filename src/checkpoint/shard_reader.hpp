// The shard reader shared by the checkpoint loaders (qkv_loaders.cpp, experts_loaders.cpp): the
// tensors of one projection in any of the five layouts, read in place from the mapped file and
// checked (docs/checkpoints.md). Internal to src/checkpoint.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "quantkv/checkpoint.hpp"

namespace quantkv::checkpoint_detail {

std::string str(int64_t v);
std::string shape_str(const std::vector<int64_t>& s);

// The tensors the loaders read: one file, or a checkpoint (one file or shards).
class Tensors {
 public:
  explicit Tensors(const SafetensorsFile& f) : file_(&f) {}
  explicit Tensors(const SafetensorsCheckpoint& c) : ckpt_(&c) {}
  bool has(const std::string& name) const {
    return file_ != nullptr ? file_->find(name) != nullptr : ckpt_->contains(name);
  }
  // Errors: missing, or (sharded) its shard cannot be read or does not hold it.
  Status get(const std::string& name, const SafetensorsTensor** out) const {
    if (ckpt_ != nullptr) return ckpt_->tensor(name, out);
    *out = file_->find(name);
    return *out != nullptr
               ? Status::Ok()
               : invalid_argument("tensor '" + name + "': missing from " + file_->label());
  }
  const std::string& label() const { return file_ != nullptr ? file_->label() : ckpt_->label(); }
  std::vector<std::string> names() const {
    if (ckpt_ != nullptr) return ckpt_->tensor_names();
    std::vector<std::string> out;
    for (const SafetensorsTensor& t : file_->tensors()) out.push_back(t.name);
    return out;
  }

 private:
  const SafetensorsFile* file_ = nullptr;
  const SafetensorsCheckpoint* ckpt_ = nullptr;
};

// One projection in the library's byte layout: data [n, row_bytes(k)] (packed e2m1 with the
// even element in the low nibble, or e4m3) and linear scales [n, k / SFV], both pointing into
// the mapped file. Global scales are one per tensor or (a fused projection) one per section.
struct Shard {
  CheckpointFormat format{};
  int64_t n = 0, k = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  int scale_sections = 1;              // 3: the global scales below differ per q/k/v section
  float weight_factor[3] = {1, 1, 1};  // dequantised = value * |scale| * weight_factor (1 / g_w)
  float input_global[3] = {1, 1, 1};   // g_a
};

// "tensor 'NAME': WHAT".
Status tensor_error(const std::string& name, const std::string& what);
// The tensor `name`, of one of `dtypes` (names joined for the message).
Status get_tensor(const Tensors& f, const std::string& name,
                  std::initializer_list<const char*> dtypes, const SafetensorsTensor** out);
Status check_shape(const SafetensorsTensor& t, const std::vector<int64_t>& want, const char* what);
// Packed e2m1 data as U8 (two codes a byte) or F4 (one code an element).
bool is_packed_fp4(const SafetensorsTensor& t);
int64_t codes_per_unit(const SafetensorsTensor& t);
// Element i of an F32 or BF16 tensor (the caller has checked the dtype and the size).
float float_element(const SafetensorsTensor& t, int64_t i);

// Reads projection `p` in whichever layout its tensors have; `per_section` admits global
// scales of shape [3] (a fused q/k/v projection).
Status read_shard(const Tensors& f, const std::string& p, bool per_section, Shard* s);

}  // namespace quantkv::checkpoint_detail
