// checkpoint/json.h: a tiny JSON writer for --metrics-jsonl, `--plan --json`, the checkpoint manifest
// and Hugging Face's config.json (checkpoint/json_document.h reads them back, with nlohmann/json).
//
// Streaming, no document tree: the report writes keys and values in order, and the writer
// only tracks whether a comma is due. Compact (one line, for JSON lines) or indented.
// Non-finite doubles become null, since JSON has no NaN or Infinity.
//
// defines: JsonWriter
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace paralab {

class JsonWriter {
 public:
  explicit JsonWriter(bool pretty = false) : pretty_(pretty) {}

  JsonWriter& begin_object() { open('{'); return *this; }
  JsonWriter& end_object() { close('}'); return *this; }
  JsonWriter& begin_array() { open('['); return *this; }
  JsonWriter& end_array() { close(']'); return *this; }

  JsonWriter& key(const std::string& k) {
    separate();
    quote(k);
    out_ += pretty_ ? ": " : ":";
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& s) { separate(); quote(s); return *this; }
  JsonWriter& value(const char* s) { return value(std::string(s)); }
  JsonWriter& value(bool b) { separate(); out_ += b ? "true" : "false"; return *this; }
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(int64_t v) { separate(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(double v) {
    separate();
    if (!std::isfinite(v)) { out_ += "null"; return *this; }
    // the shortest %.Ng that reads back as the same double (17 digits always do): exact,
    // FLOP counts above 2^53 as precise as computed, and 1e-05 written as 1e-05
    char buf[32];
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    out_ += buf;
    return *this;
  }
  template <typename T>
  JsonWriter& field(const std::string& k, const T& v) { key(k); return value(v); }

  const std::string& str() const { return out_; }

 private:
  void open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (pretty_ && !empty) newline();
    out_ += c;
  }
  // Emits the comma and indentation owed before a new key or element.
  void separate() {
    if (after_key_) { after_key_ = false; return; }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    if (pretty_) newline();
  }
  void newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  void quote(const std::string& s) {
    out_ += '"';
    for (char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
  }

  bool pretty_;
  bool after_key_ = false;
  std::vector<bool> first_;  // per open container: no element written yet
  std::string out_;
};

}  // namespace paralab
