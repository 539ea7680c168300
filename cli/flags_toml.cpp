// cli/flags_toml.cpp: the --config files, read as the TOML subset paralab accepts before CLI11
// reads them. CLI11's reader is lenient: an unterminated "gpt reaches the flag as `"gpt`,
// a line without `=` sets a switch, a # inside a string cuts it, an unquoted word is a
// string, so its errors name the flag and a mangled value, never the file and the line.
// This reader accepts what configs/ use and says, on one line, where anything else is:
//   key = value   # a comment
// with bare keys (the long flag names without dashes), "basic" and 'literal' strings
// (no escapes, no #), integers, floats, true / false, and one-line arrays of those. Each
// key must name a flag and each value have the flag's type; a key may be set once per file.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags_impl.h"  // defines: ConfigEntry, check_config_files, and through cli/flags.h FlagError

namespace paralab {

namespace {

enum class Kind { STRING, INTEGER, FLOAT, BOOLEAN, ARRAY, BARE };

struct Value {
  Kind kind = Kind::BARE;
  std::string text;  // as written, for the messages
  std::vector<Value> items;
};

// TOML's integers: decimal with an optional sign and no leading zero, or 0x (hex), 0o
// (octal), 0b (binary) without a sign; an underscore may stand between two digits. The value
// as decimal text in *decimal ("0x1F" -> "31", "1_000" -> "1000"), for CLI11, which reads
// decimal and C's 0x (and, C-like, reads 010 as 8: TOML forbids that leading zero).
bool toml_integer(const std::string& t, std::string* decimal) {
  size_t i = 0;
  const bool sign = !t.empty() && (t[0] == '+' || t[0] == '-');
  if (sign) ++i;
  int base = 10;
  if (t.size() > i + 1 && t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'o' || t[i + 1] == 'b')) {
    if (sign) return false;
    base = t[i + 1] == 'x' ? 16 : t[i + 1] == 'o' ? 8 : 2;
    i += 2;
  }
  std::string digits;
  bool previous_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_') {
      if (!previous_digit || i + 1 == t.size()) return false;
      previous_digit = false;
      continue;
    }
    const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : base == 16 && std::isxdigit(static_cast<unsigned char>(c))
                      ? std::tolower(static_cast<unsigned char>(c)) - 'a' + 10
                      : 99;
    if (d >= base) return false;
    digits += c;
    previous_digit = true;
  }
  if (digits.empty() || (base == 10 && digits.size() > 1 && digits[0] == '0')) return false;
  if (decimal) {
    errno = 0;
    const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE) return false;
    *decimal = (sign && t[0] == '-' ? "-" : "") + std::to_string(v);
  }
  return true;
}
bool is_integer(const std::string& t) { return toml_integer(t, nullptr); }

// A --config file is TOML text: UTF-8 (a leading byte-order mark is dropped) without control
// characters other than tab, newline and carriage return. "" or why not, naming where.
std::string not_text(const std::string& text) {
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') ++line;
    size_t extra = 0;
    if (c >= 0x80) extra = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 9;
    bool bad = (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F || extra == 9 ||
               i + extra >= text.size() + (extra ? 0 : 1);
    for (size_t k = 1; !bad && k <= extra; ++k)
      bad = (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80;
    if (bad) {
      char what[96];
      std::snprintf(what, sizeof what, "not a TOML text file (byte 0x%02x at line %d, offset %zu)",
                    c, line, i);
      return what;
    }
    i += extra;
  }
  return "";
}

std::string strip_bom(std::string text) {
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  return text;
}

// CLI11 reads the files too (its values are the ones applied): the same text, without the
// byte-order mark, with TOML's integer forms written as decimal.
class TomlForCli11 : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::stringstream raw;
    raw << input.rdbuf();
    std::istringstream lines(strip_bom(raw.str()));
    std::string out, line;
    while (std::getline(lines, line)) {
      const size_t eq = line.find('=');
      if (eq != std::string::npos) line = line.substr(0, eq + 1) + decimal_values(line.substr(eq + 1));
      out += line + "\n";
    }
    std::istringstream normalized(out);
    return CLI::ConfigTOML::from_config(normalized);
  }

 private:
  // Every bare word of a value (a scalar, or an array's items) that is a TOML integer.
  static std::string decimal_values(const std::string& value) {
    std::string out, word;
    auto flush = [&]() {
      std::string decimal;
      out += toml_integer(word, &decimal) ? decimal : word;
      word.clear();
    };
    for (size_t i = 0; i < value.size(); ++i) {
      const char c = value[i];
      if (c == '"' || c == '\'') {  // a string, as it is
        flush();
        const size_t close = value.find(c, i + 1);
        const size_t end = close == std::string::npos ? value.size() : close + 1;
        out += value.substr(i, end - i);
        i = end - 1;
      } else if (c == '#') {  // the comment, as it is
        flush();
        return out + value.substr(i);
      } else if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == '[' || c == ']') {
        flush();
        out += c;
      } else {
        word += c;
      }
    }
    flush();
    return out;
  }
};

// TOML's floats without underscores: 1.5, -2e-3, 6E4, inf, nan (CLI11 converts these).
bool is_float(const std::string& t) {
  size_t i = (!t.empty() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
  if (t.compare(i, std::string::npos, "inf") == 0 || t.compare(i, std::string::npos, "nan") == 0)
    return true;
  auto digits = [&]() {
    const size_t start = i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
    return i > start;
  };
  if (!digits()) return false;
  const bool fraction = i < t.size() && t[i] == '.';
  if (fraction && (++i, !digits())) return false;
  const bool exponent = i < t.size() && (t[i] == 'e' || t[i] == 'E');
  if (exponent) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == t.size() && (fraction || exponent);
}

// A cursor over one file's text; fail() names the file and the line.
class Reader {
 public:
  Reader(std::string path, std::string text) : path_(std::move(path)), s_(std::move(text)) {}

  [[noreturn]] void fail(int line, const std::string& what) const {
    throw FlagError("--config " + path_ + ":" + std::to_string(line) + ": " + what);
  }
  bool done() const { return i_ >= s_.size(); }
  int line() const { return line_; }
  char peek() const { return done() ? '\n' : s_[i_]; }
  bool at_end_of_line() const { return peek() == '\n' || peek() == '#'; }
  void skip_spaces() {
    while (!done() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  std::string rest_of_line() const {
    const size_t eol = s_.find('\n', i_);
    std::string r = s_.substr(i_, eol == std::string::npos ? std::string::npos : eol - i_);
    while (!r.empty() && (r.back() == '\r' || r.back() == ' ')) r.pop_back();
    return r;
  }
  void advance() { ++i_; }
  void next_line() {
    const size_t eol = s_.find('\n', i_);
    i_ = eol == std::string::npos ? s_.size() : eol + 1;
    ++line_;
  }
  std::string bare_key() {
    const size_t start = i_;
    while (!done() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                       s_[i_] == '_'))
      ++i_;
    return s_.substr(start, i_ - start);
  }

  Value value(const std::string& key) {
    if (peek() == '[') return array(key);
    return scalar(key);
  }

 private:
  Value scalar(const std::string& key) {
    const char c = peek();
    Value v;
    if (c == '"' || c == '\'') {
      if (s_.compare(i_, 3, std::string(3, c)) == 0)
        fail(line_, key + ": multi-line strings are not read; write the value on one line");
      size_t j = i_ + 1;
      while (j < s_.size() && s_[j] != c && s_[j] != '\n') ++j;
      v.text = s_.substr(i_, j - i_ + (j < s_.size() && s_[j] == c));
      if (j >= s_.size() || s_[j] != c) {
        std::string shown = v.text;
        while (!shown.empty() && (shown.back() == '\r' || shown.back() == ' ')) shown.pop_back();
        fail(line_, "unterminated string " + shown + " (the closing " + std::string(1, c) +
                        " is missing)");
      }
      const std::string inner = v.text.substr(1, v.text.size() - 2);
      if (inner.find('#') != std::string::npos)
        fail(line_, key + ": a # inside a string is read as the start of a comment");
      if (c == '"' && inner.find('\\') != std::string::npos)
        fail(line_, key + ": escapes are not read in \"strings\"; use a 'literal string'");
      v.kind = Kind::STRING;
      i_ = j + 1;
      return v;
    }
    const size_t start = i_;
    while (!done() && !std::isspace(static_cast<unsigned char>(s_[i_])) && s_[i_] != ',' &&
           s_[i_] != ']' && s_[i_] != '#')
      ++i_;
    v.text = s_.substr(start, i_ - start);
    if (v.text.empty()) fail(line_, key + " has no value");
    v.kind = v.text == "true" || v.text == "false" ? Kind::BOOLEAN
             : is_integer(v.text)                  ? Kind::INTEGER
             : is_float(v.text)                    ? Kind::FLOAT
                                                   : Kind::BARE;
    return v;
  }

  // [a, b, ...] on one line: CLI11 reads an array over several lines only when its first
  // line holds more than the [, and then keeps the comments of the others as values.
  Value array(const std::string& key) {
    Value v;
    v.kind = Kind::ARRAY;
    ++i_;
    auto skip = [&]() {
      skip_spaces();
      if (peek() == '\n' || peek() == '#')
        fail(line_, key + ": unterminated array (the closing ] must be on the same line)");
    };
    for (;;) {
      skip();
      if (peek() == ']') break;
      if (peek() == '[') fail(line_, key + ": arrays inside an array are not read");
      v.items.push_back(scalar(key));
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != ']')
        fail(line_, key + ": expected , or ] after " + v.items.back().text + " in the array");
      break;
    }
    ++i_;
    v.text = "an array";
    return v;
  }

  std::string path_, s_;
  size_t i_ = 0;
  int line_ = 1;
};

// The kind of value an option takes: a switch expects no value on the command line; else
// CLI11's type names INT, UINT, FLOAT; else text.
const char* expected(const CLI::Option& opt, Kind* kind) {
  const std::string t = opt.get_type_name();
  if (opt.get_expected_max() == 0) return *kind = Kind::BOOLEAN, "true or false";  // a switch
  if (t == kIntOrList) return *kind = Kind::BARE, "an integer or a quoted string";
  if (t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0) return *kind = Kind::INTEGER, "an integer";
  if (t.rfind("FLOAT", 0) == 0) return *kind = Kind::FLOAT, "a number";
  return *kind = Kind::STRING, "a quoted string";
}

bool fits(Kind want, Kind got) {
  return want == got || (want == Kind::FLOAT && got == Kind::INTEGER);
}

void check_type(const Reader& r, int line, const std::string& key, const CLI::Option& opt,
                const Value& v) {
  Kind want;
  const std::string what = expected(opt, &want);
  if (want == Kind::BARE) {  // kIntOrList: an integer, or a list written as a string
    if (v.kind == Kind::ARRAY)
      r.fail(line, key + " takes an integer or a quoted string; write a list as a string, "
                         "e.g. " + key + " = \"[1,0,1,0]\"");
    if (v.kind != Kind::INTEGER && v.kind != Kind::STRING)
      r.fail(line, key + " must be " + what + ", got " + v.text);
    return;
  }
  if (v.kind == Kind::ARRAY) {
    if (opt.get_expected_max() <= 1) r.fail(line, key + " takes one value, got an array");
    for (const Value& item : v.items)
      if (!fits(want, item.kind))
        r.fail(line, key + " takes a list of " + (want == Kind::STRING ? "quoted strings" : what) +
                         ", got " + item.text);
    return;
  }
  if (!fits(want, v.kind)) r.fail(line, key + " must be " + what + ", got " + v.text);
}

}  // namespace

std::shared_ptr<CLI::Config> toml_config_for_cli11() { return std::make_shared<TomlForCli11>(); }

std::vector<ConfigEntry> check_config_files(const CLI::App& app,
                                            const std::vector<std::string>& files) {
  std::vector<ConfigEntry> entries;
  for (const std::string& path : files) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw FlagError("--config " + path + ": no such file");
    if (!S_ISREG(st.st_mode)) throw FlagError("--config " + path + ": not a regular file");
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) throw FlagError("--config " + path + ": cannot read");
    const std::string content = strip_bom(text.str());
    const std::string why = not_text(content);
    if (!why.empty()) throw FlagError("--config " + path + ": " + why);
    Reader r(path, content);
    std::map<const CLI::Option*, int> first_line;  // a key may be set once per file
    while (!r.done()) {
      r.skip_spaces();
      if (r.at_end_of_line()) {
        r.next_line();
        continue;
      }
      const int line = r.line();
      if (r.peek() == '[')
        r.fail(line, r.rest_of_line() + ": tables are not read; every key is a top-level flag "
                                        "name (num-layers = 4)");
      const std::string shown = r.rest_of_line(), key = r.bare_key();
      r.skip_spaces();
      if (key.empty() || r.peek() != '=')
        r.fail(line, "expected key = value, got '" + shown + "'");
      const CLI::Option* opt = app.get_option_no_throw((key.size() == 1 ? "-" : "--") + key);
      if (opt == nullptr) {
        const std::string meant = closest_flag(app, key);
        r.fail(line, "unknown key '" + key + "' (" +
                         (meant.empty() ? "keys are long flag names without the dashes, e.g. "
                                          "num-layers = 4"
                                        : "did you mean " + meant.substr(2) + "?") + ")");
      }
      if (opt == app.get_config_ptr() || opt == app.get_help_ptr())
        r.fail(line, key + " cannot be set in a config file");
      if (first_line.count(opt))
        r.fail(line, key + " sets " + opt->get_name() + " again (first at line " +
                         std::to_string(first_line[opt]) + ")");
      first_line[opt] = line;
      r.advance();  // past the =
      r.skip_spaces();
      if (r.at_end_of_line()) r.fail(line, key + " has no value");
      const Value v = r.value(key);
      r.skip_spaces();
      if (!r.at_end_of_line())
        r.fail(r.line(), "unexpected '" + r.rest_of_line() + "' after the value of " + key +
                             " (a comment starts with #)");
      check_type(r, line, key, *opt, v);
      entries.push_back({path, line, key, opt});
      r.next_line();
    }
  }
  return entries;
}

}  // namespace paralab
