// checkpoint/json_document.cpp: nlohmann's SAX parser driving its own tree builder, with a
// handler in between that keeps paralab's two rules (no duplicate key, depth <= 64) and the
// byte offset of every key. The offsets come from the input itself: nlohmann reads the text
// through an iterator, and this one records how far it has been moved.
#include "checkpoint/json_document.h"

#include <iterator>
#include <set>
#include <vector>
// defines: JsonWriter (to quote a key in a message)
#include "checkpoint/json.h"

namespace paralab {

namespace {

constexpr int kMaxDepth = 64;

// A const char* that remembers, in *reached, the offset of the next byte the parser reads.
struct CountingIterator {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char* base = nullptr;
  size_t* reached = nullptr;
  reference operator*() const { return *p; }
  CountingIterator& operator++() {
    ++p;
    *reached = static_cast<size_t>(p - base);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& o) const { return p == o.p; }
  bool operator!=(const CountingIterator& o) const { return p != o.p; }
};

std::string line_column(const std::string& text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') ++line, column = 1;
    else ++column;
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// The JSON pointer escape of one key: ~ -> ~0, / -> ~1.
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

class Handler {
 public:
  Handler(Json& root, const std::string& text, const size_t& reached,
          std::map<std::string, size_t>& offsets)
      : dom_(root), text_(text), reached_(reached), offsets_(offsets) {}

  bool null() { return element() && dom_.null(); }
  bool boolean(bool v) { return element() && dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return element() && dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return element() && dom_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const std::string& s) {
    return element() && dom_.number_float(v, s);
  }
  bool string(std::string& v) { return element() && dom_.string(v); }
  bool binary(Json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    open(reached_ - 1);
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool end_object() {
    close();
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    open(reached_ - 1);
    keys_.emplace_back();
    return dom_.start_array(n);
  }
  bool end_array() {
    close();
    keys_.pop_back();
    return dom_.end_array();
  }
  bool key(std::string& k) {
    // The key's closing quote is the last byte read; its opening one, the last unescaped
    // quote before it (inside a valid string every quote is escaped).
    size_t start = reached_ >= 2 ? reached_ - 2 : 0;
    while (start > 0) {
      if (text_[start] == '"') {
        size_t slashes = 0;
        while (start > slashes && text_[start - 1 - slashes] == '\\') ++slashes;
        if (slashes % 2 == 0) break;
      }
      --start;
    }
    if (!keys_.back().insert(k).second)
      throw JsonError(line_column(text_, start) + ": the key " + JsonWriter().value(k).str() +
                      " is given twice in one object");
    pending_key_ = pointer_token(k);
    offsets_[path_ + "/" + pending_key_] = start;
    return dom_.key(k);
  }
  template <class Exception>
  bool parse_error(std::size_t byte, const std::string&, const Exception& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 6:
    // syntax error while parsing ..."; its position counts from 1 and is ours again below.
    std::string what = e.what();
    const size_t colon = what.find(": ");
    if (what.rfind("[json.exception.", 0) == 0 && colon != std::string::npos)
      what = what.substr(colon + 2);
    throw JsonError(line_column(text_, byte > 0 ? byte - 1 : 0) + ": " + what);
  }

 private:
  // A value begins: inside an array it is the next element (its pointer, for its children).
  bool element() {
    if (!containers_.empty() && containers_.back().array) ++containers_.back().count;
    return true;
  }
  void open(size_t at) {
    std::string child = path_;
    if (!containers_.empty()) {
      if (containers_.back().array) child += "/" + std::to_string(containers_.back().count++);
      else child += "/" + pending_key_;
    }
    if (static_cast<int>(containers_.size()) >= kMaxDepth)
      throw JsonError(line_column(text_, at) + ": nested more than " +
                      std::to_string(kMaxDepth) + " deep");
    containers_.push_back({path_, text_[at] == '[', 0});
    path_ = child;
    if (!offsets_.count(path_)) offsets_[path_] = at;
  }
  void close() {
    path_ = containers_.back().parent;
    containers_.pop_back();
  }

  struct Container {
    std::string parent;
    bool array;
    size_t count;
  };
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const std::string& text_;
  const size_t& reached_;
  std::map<std::string, size_t>& offsets_;
  std::vector<std::set<std::string>> keys_;
  std::vector<Container> containers_;
  std::string path_, pending_key_;
};

}  // namespace

JsonDocument::JsonDocument(const std::string& text) : text_(text) {
  size_t reached = 0;
  Handler handler(root_, text_, reached, offsets_);
  const char* base = text_.data();
  CountingIterator first{base, base, &reached}, last{base + text_.size(), base, &reached};
  Json::sax_parse(first, last, &handler);
}

std::string JsonDocument::where(const std::string& at) const {
  std::string p = at;
  for (;;) {
    const auto it = offsets_.find(p);
    if (it != offsets_.end()) return line_column(text_, it->second);
    const size_t slash = p.rfind('/');
    if (slash == std::string::npos) return line_column(text_, 0);
    p = p.substr(0, slash);
  }
}

int64_t json_int(const Json& v) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  throw JsonError("expected an integer");
}

const char* json_kind(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "true or false";
    case Json::value_t::null: return "null";
    default: return "a number";
  }
}

}  // namespace paralab
