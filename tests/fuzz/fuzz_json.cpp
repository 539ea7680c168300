// tests/fuzz/fuzz_json.cpp: libFuzzer target for the strict JSON reader (checkpoint/json_reader.h).
// Any bytes either parse or throw JsonError; another exception escapes and ends the run (a
// bug), as do a crash and a sanitizer's report. A parsed document's numbers are read with
// every accessor, so that as_int's and as_double's paths run on hostile text too.
#include <cstddef>
#include <cstdint>
#include <string>
#include "checkpoint/json_reader.h"

namespace {

void visit(const paralab::JsonValue& v) {
  if (v.is_number()) {
    v.as_double();
    try {
      v.as_int();
    } catch (const paralab::JsonError&) {
    }
  } else if (v.is_array()) {
    for (const paralab::JsonValue& item : v.as_array()) visit(item);
  } else if (v.is_object()) {
    for (const auto& m : v.members()) visit(m.second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    visit(paralab::parse_json(std::string(reinterpret_cast<const char*>(data), size)));
  } catch (const paralab::JsonError&) {
  }
  return 0;
}
