// checkpoint/json_reader.cpp: a recursive-descent parser of RFC 8259 JSON that refuses, with the
// byte's offset, everything the grammar does not allow (the rules are in json_reader.h).
//
//   value  = ws (object | array | string | number | true | false | null) ws
//   number = [ '-' ] ( '0' | [1-9] [0-9]* ) [ '.' [0-9]+ ] [ ( 'e' | 'E' ) [ '+' | '-' ] [0-9]+ ]
//   ws     = ( ' ' | '\t' | '\n' | '\r' )*
//
// UTF-8 is checked against the Unicode standard's table of well-formed sequences (Table
// 3-7): no overlong forms, no surrogates (U+D800..DFFF), nothing above U+10FFFF.
#include "checkpoint/json_reader.h"

#include <locale.h>
#include <stdlib.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <set>
// defines: JsonWriter (to quote a key in a message)
#include "checkpoint/json.h"

namespace paralab {

namespace {

constexpr int kMaxDepth = 64;

// Length of the longest prefix of s[0, n) that the number grammar allows (0: none).
size_t number_length(const char* s, size_t n) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < n && s[i] == '-') ++i;
  if (i < n && s[i] == '0') ++i;
  else if (!digits()) return 0;
  if (i + 1 < n && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') {
    ++i;
    digits();
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < n && (s[j] == '+' || s[j] == '-')) ++j;
    if (j < n && s[j] >= '0' && s[j] <= '9') {
      i = j;
      digits();
    }
  }
  return i;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A key for a message, as JSON writes it (so a newline in it stays on the message's one
// line), cut to a readable length at a UTF-8 boundary.
std::string quoted(const std::string& key) {
  constexpr size_t kShown = 120;
  if (key.size() <= kShown) return JsonWriter().value(key).str();
  size_t cut = kShown;
  while ((static_cast<unsigned char>(key[cut]) & 0xC0) == 0x80) --cut;
  return JsonWriter().value(key.substr(0, cut) + "...").str();
}

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected " + shown() + " after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(i_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    throw JsonError("byte " + std::to_string(at) + ": " + what);
  }
  unsigned char peek() const { return static_cast<unsigned char>(s_[i_]); }
  bool at_end() const { return i_ >= s_.size(); }
  // The byte at the cursor, for a message: printable ASCII as 'c', anything else in hex.
  std::string shown() const {
    if (at_end()) return "end of input";
    const unsigned char c = peek();
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    static const char hex[] = "0123456789abcdef";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
  }
  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++i_;
  }
  void expect_word(const char* word) {
    for (const char* w = word; *w; ++w, ++i_)
      if (at_end() || s_[i_] != *w) fail(std::string("expected '") + word + "'");
  }

  JsonValue value(int depth) {
    skip_ws();
    if (at_end()) fail("expected a value, found the end of input");
    switch (peek()) {
      case '{': return object(depth + 1);
      case '[': return array(depth + 1);
      case '"': return JsonValue::string(string());
      case 't': expect_word("true"); return JsonValue::boolean(true);
      case 'f': expect_word("false"); return JsonValue::boolean(false);
      case 'n': expect_word("null"); return JsonValue::null();
      default: break;
    }
    const size_t n = number_length(s_.data() + i_, s_.size() - i_);
    if (n == 0) fail("expected a value, found " + shown());
    const size_t from = i_;
    i_ += n;
    try {
      return JsonValue::number(s_.substr(from, n));
    } catch (const JsonError&) {
      fail_at(from, "number out of the range of a double");
    }
  }

  void enter(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    ++i_;
  }

  JsonValue array(int depth) {
    enter(depth);
    std::vector<JsonValue> items;
    skip_ws();
    if (!at_end() && peek() == ']') {
      ++i_;
      return JsonValue::array(std::move(items));
    }
    for (;;) {
      items.push_back(value(depth));
      skip_ws();
      if (!at_end() && peek() == ',') { ++i_; continue; }
      if (!at_end() && peek() == ']') { ++i_; break; }
      fail("expected ',' or ']' in an array, found " + shown());
    }
    return JsonValue::array(std::move(items));
  }

  JsonValue object(int depth) {
    enter(depth);
    std::vector<std::pair<std::string, JsonValue>> members;
    // A tree, not a hash set: its O(log n) per key holds whatever the keys, while a hostile
    // file can pick keys that collide in a fixed hash and make the check quadratic.
    std::set<std::string> keys;
    skip_ws();
    if (!at_end() && peek() == '}') {
      ++i_;
      return JsonValue::object(std::move(members));
    }
    for (;;) {
      skip_ws();
      if (at_end() || peek() != '"') fail("expected a string key, found " + shown());
      const size_t key_at = i_;
      std::string key = string();
      if (!keys.insert(key).second)
        fail_at(key_at, "duplicate key " + quoted(key) + " in an object");
      skip_ws();
      if (at_end() || peek() != ':') fail("expected ':' after a key, found " + shown());
      ++i_;
      JsonValue v = value(depth);
      members.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (!at_end() && peek() == ',') { ++i_; continue; }
      if (!at_end() && peek() == '}') { ++i_; break; }
      fail("expected ',' or '}' in an object, found " + shown());
    }
    return JsonValue::object(std::move(members));
  }

  // The cursor is on the opening quote; leaves it after the closing one.
  std::string string() {
    ++i_;
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = peek();
      if (c == '"') { ++i_; return out; }
      if (c < 0x20) fail("control character " + shown() + " in a string (escape it)");
      if (c == '\\') { escape(out); continue; }
      if (c < 0x80) { out += static_cast<char>(c); ++i_; continue; }
      utf8_sequence(out);
    }
  }

  void escape(std::string& out) {
    const size_t from = i_++;
    if (at_end()) fail("unterminated escape");
    const char c = static_cast<char>(peek());
    ++i_;
    switch (c) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: fail_at(from + 1, "unknown escape");
    }
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(from, "a low surrogate without a high one before it");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      // UTF-16's pair: cp = 0x10000 + (high - 0xD800) * 0x400 + (low - 0xDC00)
      const size_t low_at = i_;
      if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u')
        fail_at(low_at, "a high surrogate not followed by a \\u low surrogate");
      i_ += 2;
      const uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF)
        fail_at(low_at, "a high surrogate not followed by a \\u low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      if (at_end()) fail("\\u needs 4 hex digits");
      const char c = static_cast<char>(peek());
      uint32_t d;
      if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<uint32_t>(c - 'A' + 10);
      else fail("\\u needs 4 hex digits");
      v = v * 16 + d;
    }
    return v;
  }

  // One multi-byte UTF-8 character, the cursor on its lead byte. Table 3-7: the lead fixes
  // the length and the range of the second byte; later bytes are 80..BF.
  void utf8_sequence(std::string& out) {
    const unsigned char lead = peek();
    int length;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) length = 2;
    else if (lead == 0xE0) length = 3, lo = 0xA0;
    else if (lead >= 0xE1 && lead <= 0xEC) length = 3;
    else if (lead == 0xED) length = 3, hi = 0x9F;  // not a surrogate
    else if (lead >= 0xEE && lead <= 0xEF) length = 3;
    else if (lead == 0xF0) length = 4, lo = 0x90;
    else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
    else if (lead == 0xF4) length = 4, hi = 0x8F;  // not above U+10FFFF
    else fail("invalid UTF-8 lead " + shown());
    const size_t from = i_++;
    for (int k = 1; k < length; ++k, ++i_) {
      if (at_end()) fail("truncated UTF-8 sequence");
      const unsigned char c = peek();
      if (c < lo || c > hi) fail("invalid UTF-8 continuation " + shown());
      lo = 0x80, hi = 0xBF;
    }
    out.append(s_, from, static_cast<size_t>(length));
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

bool JsonValue::as_bool() const {
  if (!is_bool()) throw JsonError("expected a bool");
  return bool_;
}

double JsonValue::as_double() const {
  if (!is_number()) throw JsonError("expected a number");
  return number_;
}

int64_t JsonValue::as_int() const {
  if (!is_number() || text_.find_first_of(".eE") != std::string::npos)
    throw JsonError("expected an integer");
  int64_t v = 0;
  const char* end = text_.data() + text_.size();
  const std::from_chars_result r = std::from_chars(text_.data(), end, v);
  if (r.ec != std::errc() || r.ptr != end) throw JsonError("expected an integer");
  return v;
}

const std::string& JsonValue::as_string() const {
  if (!is_string()) throw JsonError("expected a string");
  return text_;
}

const std::vector<JsonValue>& JsonValue::as_array() const {
  if (!is_array()) throw JsonError("expected an array");
  return items_;
}

const std::vector<std::pair<std::string, JsonValue>>& JsonValue::members() const {
  if (!is_object()) throw JsonError("expected an object");
  return members_;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& m : members())
    if (m.first == key) return &m.second;
  return nullptr;
}

const JsonValue& JsonValue::at(const std::string& key) const {
  const JsonValue* v = find(key);
  if (!v) throw JsonError("missing \"" + key + "\"");
  return *v;
}

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.kind = Kind::BOOL;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::number(const std::string& text) {
  if (text.empty() || number_length(text.data(), text.size()) != text.size())
    throw JsonError("not a JSON number: " + text);
  JsonValue v;
  v.kind = Kind::NUMBER;
  v.text_ = text;
  // strtod_l in the C locale: '.' is the decimal point whatever the process's locale says.
  // An underflow reads as 0 or a subnormal; an overflow (HUGE_VAL) has no double to be.
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
  errno = 0;
  v.number_ = strtod_l(text.c_str(), nullptr, c_locale);
  if (errno == ERANGE && std::isinf(v.number_))
    throw JsonError("number out of the range of a double: " + text);
  return v;
}

JsonValue JsonValue::string(std::string s) {
  JsonValue v;
  v.kind = Kind::STRING;
  v.text_ = std::move(s);
  return v;
}

JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind = Kind::ARRAY;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::object(std::vector<std::pair<std::string, JsonValue>> members) {
  JsonValue v;
  v.kind = Kind::OBJECT;
  v.members_ = std::move(members);
  return v;
}

JsonValue parse_json(const std::string& text) { return Parser(text).document(); }

}  // namespace paralab
