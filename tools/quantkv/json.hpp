// A small streaming JSON writer for the program's `--json` output (the program only writes
// JSON, never reads it, so a writer is all it needs). Objects and arrays nest; numbers that are
// not finite become null, since JSON has no NaN or infinity.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace quantkv::tool {

class JsonWriter {
 public:
  // Starts an object or array; as the value of `key` when inside an object. Arrays opened
  // with `inline_items` keep their items on one line (short lists of numbers).
  JsonWriter& begin_object(std::string_view key = {});
  JsonWriter& end_object();
  JsonWriter& begin_array(std::string_view key = {}, bool inline_items = false);
  JsonWriter& end_array();

  // Members of an object (key given) or items of an array (key empty).
  JsonWriter& field(std::string_view key, std::string_view v);
  JsonWriter& field(std::string_view key, const char* v) { return field(key, std::string_view(v)); }
  JsonWriter& field(std::string_view key, double v);
  JsonWriter& field(std::string_view key, int64_t v);
  JsonWriter& field(std::string_view key, int v) { return field(key, int64_t(v)); }
  JsonWriter& field(std::string_view key, uint64_t v);
  JsonWriter& field(std::string_view key, bool v);
  JsonWriter& null_field(std::string_view key);
  JsonWriter& item(double v) { return field({}, v); }
  JsonWriter& item(int64_t v) { return field({}, v); }
  JsonWriter& item(std::string_view v) { return field({}, v); }

  // The document so far (complete once every begin has its end).
  const std::string& str() const { return out_; }

 private:
  struct Level {
    bool is_array;
    bool inline_items;
    bool empty = true;
  };
  void prefix(std::string_view key);  // separator, newline + indent, "key": when in an object
  void raw(std::string_view text) { out_.append(text); }
  JsonWriter& close(char bracket);

  std::string out_;
  std::vector<Level> stack_;
};

// `text` as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

}  // namespace quantkv::tool
