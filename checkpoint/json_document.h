// checkpoint/json_document.h: every JSON file paralab reads (a checkpoint's manifest, a
// safetensors header, Hugging Face's config.json and model.safetensors.index.json, a
// DeepSpeed config), parsed by nlohmann/json (Debian's nlohmann-json3-dev) into its document
// tree, with two rules of paralab's on top and the position of every object member kept for
// the messages. checkpoint/json.h writes JSON (a streaming writer, simpler than a tree).
//
// nlohmann's parser is RFC 8259's strict one: no comments, no trailing commas, no NaN, valid
// UTF-8 and escapes, nothing after the value. Added here, because these files come from
// elsewhere and may be hostile (tests/fuzz): no key twice in one object (nlohmann would keep
// the last, DeepSpeed refuses it too) and nesting at most 64 deep. An error says where, as
// "line L, column C: what" (the column counts bytes from 1).
//
// Members keep the file's order (ordered_json), so a listing follows the file. Integers read
// exactly: nlohmann keeps an integer literal as int64 or uint64, so a byte offset above 2^53
// loses nothing; json_int refuses 1.0 and 1e3 (a number with a fraction or an exponent).
//
// defines: Json, JsonError, JsonDocument, json_find, json_int, json_kind
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace paralab {

using Json = nlohmann::ordered_json;

struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class JsonDocument {
 public:
  // Parses a whole document; JsonError("line L, column C: <what>") at the first byte that
  // breaks a rule.
  explicit JsonDocument(const std::string& text);

  const Json& root() const { return root_; }
  // "line L, column C" of the value at `at` (JSON pointer "/zero_optimization/stage"): where
  // its key starts for an object member, else where its nearest such parent starts.
  std::string where(const std::string& at) const;

 private:
  Json root_;
  std::string text_;
  std::map<std::string, size_t> offsets_;  // JSON pointer -> byte offset of its key
};

// An object's member, or nullptr when it is absent or `object` is not an object.
inline const Json* json_find(const Json& object, const std::string& key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}
// An integer written without fraction or exponent that fits int64; else JsonError("expected
// an integer").
int64_t json_int(const Json& v);
// "an object", "an array", "a string", "a number", "true or false", "null": for messages.
const char* json_kind(const Json& v);

}  // namespace paralab
