// checkpoint/json_reader.h: a strict JSON reader (RFC 8259) for the files paralab reads back: a
// checkpoint's manifest, a safetensors header, Hugging Face's config.json and
// model.safetensors.index.json. checkpoint/json.h writes them.
//
// A document tree, because each of those is small (a safetensors header is at most 100 MB
// by the format's rule, and is usually kilobytes). Strict, because these files come from
// elsewhere and may be hostile (tests/fuzz): no trailing commas, no comments, no NaN, no
// duplicate keys in an object, nesting at most 64 deep, nothing after the value but
// whitespace, strings valid UTF-8 with their escapes (\uXXXX surrogate pairs joined).
// Numbers keep their text too, so an integer above 2^53 (a byte offset) reads exactly.
//
// defines: JsonValue, parse_json
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace paralab {

struct JsonError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class JsonValue {
 public:
  enum class Kind { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT };
  Kind kind = Kind::NUL;

  bool is_object() const { return kind == Kind::OBJECT; }
  bool is_array() const { return kind == Kind::ARRAY; }
  bool is_string() const { return kind == Kind::STRING; }
  bool is_number() const { return kind == Kind::NUMBER; }
  bool is_bool() const { return kind == Kind::BOOL; }
  bool is_null() const { return kind == Kind::NUL; }

  // Typed access; each throws JsonError("expected a <kind>") on the wrong kind.
  bool as_bool() const;
  double as_double() const;
  // An integer written without fraction or exponent that fits int64; else JsonError
  // ("expected an integer").
  int64_t as_int() const;
  const std::string& as_string() const;
  const std::vector<JsonValue>& as_array() const;
  // Members in file order (keys unique: the parser refused duplicates).
  const std::vector<std::pair<std::string, JsonValue>>& members() const;
  // An object's member, or nullptr when absent (JsonError when not an object).
  const JsonValue* find(const std::string& key) const;
  // An object's member; JsonError("missing \"key\"") when absent.
  const JsonValue& at(const std::string& key) const;

  // Construction (the parser's, and tests').
  static JsonValue null() { return JsonValue(); }
  static JsonValue boolean(bool b);
  static JsonValue number(const std::string& text);  // text as written in the file
  static JsonValue string(std::string s);
  static JsonValue array(std::vector<JsonValue> items);
  static JsonValue object(std::vector<std::pair<std::string, JsonValue>> members);

 private:
  bool bool_ = false;
  double number_ = 0;
  std::string text_;  // a string's value, or a number's text
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// Parses a whole document. Throws JsonError("byte N: <what>") with the 0-based offset of the
// first byte that breaks a rule.
JsonValue parse_json(const std::string& text);

}  // namespace paralab
