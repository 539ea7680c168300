// tests/fuzz/fuzz_json.cpp: libFuzzer target for the JSON reader every file goes through
// (checkpoint/json_document.h: nlohmann/json with paralab's duplicate-key and depth rules and
// the members' positions). Any bytes either parse or throw JsonError; another exception
// escapes and ends the run (a bug), as do a crash and a sanitizer's report. A parsed
// document's numbers are read with json_int, and every member's position is asked for.
#include <cstddef>
#include <cstdint>
#include <string>
#include "checkpoint/json_document.h"

namespace {

void visit(const paralab::JsonDocument& d, const paralab::Json& v, const std::string& at) {
  d.where(at);
  if (v.is_number()) {
    try {
      paralab::json_int(v);
    } catch (const paralab::JsonError&) {
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) visit(d, v[i], at + "/" + std::to_string(i));
  } else if (v.is_object()) {
    for (const auto& m : v.items()) visit(d, m.value(), at + "/" + m.key());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const paralab::JsonDocument d(std::string(reinterpret_cast<const char*>(data), size));
    visit(d, d.root(), "");
  } catch (const paralab::JsonError&) {
  }
  return 0;
}
