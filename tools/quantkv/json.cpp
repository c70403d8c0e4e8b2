#include "json.hpp"

#include <cmath>
#include <cstdio>

namespace quantkv::tool {

std::string json_quote(std::string_view text) {
  std::string s = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        s += "\\\"";
        break;
      case '\\':
        s += "\\\\";
        break;
      case '\n':
        s += "\\n";
        break;
      case '\t':
        s += "\\t";
        break;
      case '\r':
        s += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
          s += buf;
        } else {
          s += c;
        }
    }
  }
  return s + "\"";
}

void JsonWriter::prefix(std::string_view key) {
  if (stack_.empty()) return;  // the document's root value
  Level& level = stack_.back();
  if (!level.empty) raw(",");
  level.empty = false;
  if (level.inline_items) {
    if (out_.back() != '[') raw(" ");
  } else {
    raw("\n");
    out_.append(2 * stack_.size(), ' ');
  }
  if (!level.is_array) {
    raw(json_quote(key));
    raw(": ");
  }
}

JsonWriter& JsonWriter::begin_object(std::string_view key) {
  prefix(key);
  raw("{");
  stack_.push_back({false, false});
  return *this;
}

JsonWriter& JsonWriter::begin_array(std::string_view key, bool inline_items) {
  prefix(key);
  raw("[");
  stack_.push_back({true, inline_items});
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  const Level level = stack_.back();
  stack_.pop_back();
  if (!level.empty && !level.inline_items) {
    raw("\n");
    out_.append(2 * stack_.size(), ' ');
  }
  out_ += bracket;
  if (stack_.empty()) raw("\n");
  return *this;
}

JsonWriter& JsonWriter::end_object() { return close('}'); }
JsonWriter& JsonWriter::end_array() { return close(']'); }

JsonWriter& JsonWriter::field(std::string_view key, std::string_view v) {
  prefix(key);
  raw(json_quote(v));
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view key, double v) {
  prefix(key);
  if (!std::isfinite(v)) {
    raw("null");
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  raw(buf);
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view key, int64_t v) {
  prefix(key);
  raw(std::to_string(v));
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view key, uint64_t v) {
  prefix(key);
  raw(std::to_string(v));
  return *this;
}

JsonWriter& JsonWriter::field(std::string_view key, bool v) {
  prefix(key);
  raw(v ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::null_field(std::string_view key) {
  prefix(key);
  raw("null");
  return *this;
}

}  // namespace quantkv::tool
