// tests/test_json_reader.cpp: the strict JSON reader (checkpoint/json_reader.h). Valid documents
// read back exactly (nesting, escapes, surrogate pairs, integers above 2^53); each rule
// broken throws JsonError naming the first byte that breaks it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include "checkpoint/json.h"
#include "checkpoint/json_reader.h"

namespace paralab {
namespace {

// The message parse_json gives for text, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_json(text);
  } catch (const JsonError& e) {
    return e.what();
  }
  return "";
}

// Expects a refusal at byte `at` whose message mentions `what`.
void expect_refused(const std::string& text, size_t at, const std::string& what) {
  const std::string e = error_of(text);
  const std::string prefix = "byte " + std::to_string(at) + ": ";
  EXPECT_EQ(e.compare(0, prefix.size(), prefix), 0) << "text: " << text << "\nerror: " << e;
  EXPECT_NE(e.find(what), std::string::npos) << "text: " << text << "\nerror: " << e;
}

TEST(JsonReader, NestedDocument) {
  const JsonValue v = parse_json(
      " {\"a\": [1, -2.5, 3e2, true, false, null, {}, []],\n\t\"b\": {\"c\": \"d\"}} \r\n");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.members().size(), 2u);
  EXPECT_EQ(v.members()[0].first, "a");  // file order
  const auto& a = v.at("a").as_array();
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a[0].as_int(), 1);
  EXPECT_EQ(a[1].as_double(), -2.5);
  EXPECT_EQ(a[2].as_double(), 300.0);
  EXPECT_TRUE(a[3].as_bool());
  EXPECT_FALSE(a[4].as_bool());
  EXPECT_TRUE(a[5].is_null());
  EXPECT_TRUE(a[6].is_object() && a[6].members().empty());
  EXPECT_TRUE(a[7].is_array() && a[7].as_array().empty());
  EXPECT_EQ(v.at("b").at("c").as_string(), "d");
  EXPECT_EQ(v.find("z"), nullptr);
  EXPECT_THROW(v.at("z"), JsonError);
  EXPECT_TRUE(parse_json("\"just a string\"").is_string());
  EXPECT_EQ(parse_json("0").as_int(), 0);
}

TEST(JsonReader, EscapesAndUtf8) {
  EXPECT_EQ(parse_json(R"("q\" b\\ s\/ \b\f\n\r\t")").as_string(), "q\" b\\ s/ \b\f\n\r\t");
  EXPECT_EQ(parse_json(R"("\u0041\u00e9\u20AC")").as_string(), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(parse_json(R"("\u0000")").as_string(), std::string(1, '\0'));
  // U+1F600 as a UTF-16 surrogate pair, and as raw UTF-8: the same string
  EXPECT_EQ(parse_json(R"("\ud83d\ude00")").as_string(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(parse_json("\"\xf0\x9f\x98\x80\"").as_string(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(parse_json(R"("\uDBFF\uDFFF")").as_string(), "\xf4\x8f\xbf\xbf");  // U+10FFFF
}

TEST(JsonReader, IntegersAreExact) {
  EXPECT_EQ(parse_json("9007199254740993").as_int(), 9007199254740993LL);  // 2^53 + 1
  EXPECT_EQ(parse_json("9223372036854775807").as_int(), INT64_MAX);
  EXPECT_EQ(parse_json("-9223372036854775808").as_int(), INT64_MIN);
  EXPECT_EQ(parse_json("-0").as_int(), 0);
  EXPECT_THROW(parse_json("9223372036854775808").as_int(), JsonError);  // past int64
  EXPECT_THROW(parse_json("1.0").as_int(), JsonError);
  EXPECT_THROW(parse_json("1e3").as_int(), JsonError);
  EXPECT_THROW(parse_json("1E3").as_int(), JsonError);
  EXPECT_THROW(parse_json("\"1\"").as_int(), JsonError);
  EXPECT_EQ(parse_json("9223372036854775808").as_double(), 9223372036854775808.0);
  EXPECT_EQ(parse_json("1e-400").as_double(), 0.0);  // underflow reads as 0
  EXPECT_EQ(parse_json("-1.5E+3").as_double(), -1500.0);
  EXPECT_EQ(parse_json("0.1").as_double(), 0.1);
}

TEST(JsonReader, ReadsWhatJsonWriterWrites) {
  JsonWriter w(true);
  w.begin_object().field("name", std::string("tab\there \"q\" \x01"));
  w.field("big", int64_t(1) << 62).field("lr", 3e-4).key("list").begin_array();
  w.value(1).value(2).end_array().end_object();
  const JsonValue v = parse_json(w.str());
  EXPECT_EQ(v.at("name").as_string(), "tab\there \"q\" \x01");
  EXPECT_EQ(v.at("big").as_int(), int64_t(1) << 62);
  EXPECT_EQ(v.at("lr").as_double(), 3e-4);
  EXPECT_EQ(v.at("list").as_array().size(), 2u);
}

TEST(JsonReader, AccessorsCheckTheKind) {
  const JsonValue v = parse_json(R"({"s": "x", "n": 1})");
  EXPECT_THROW(v.at("s").as_double(), JsonError);
  EXPECT_THROW(v.at("n").as_string(), JsonError);
  EXPECT_THROW(v.at("n").as_bool(), JsonError);
  EXPECT_THROW(v.at("n").as_array(), JsonError);
  EXPECT_THROW(v.at("n").members(), JsonError);
  EXPECT_THROW(v.at("n").find("x"), JsonError);
  try {
    v.at("missing");
  } catch (const JsonError& e) {
    EXPECT_EQ(std::string(e.what()), "missing \"missing\"");
  }
  EXPECT_THROW(JsonValue::number("01"), JsonError);
}

TEST(JsonReader, RefusesBrokenSyntax) {
  expect_refused("", 0, "expected a value");
  expect_refused("   ", 3, "expected a value");
  expect_refused("[1,]", 3, "expected a value");
  expect_refused("{\"a\":1,}", 7, "expected a string key");
  expect_refused("{\"a\" 1}", 5, "expected ':'");
  expect_refused("{a:1}", 1, "expected a string key");
  expect_refused("[1 2]", 3, "expected ',' or ']'");
  expect_refused("{\"a\":1 \"b\":2}", 7, "expected ',' or '}'");
  expect_refused("[1", 2, "expected ',' or ']'");
  expect_refused("{} {}", 3, "after the value");
  expect_refused("1 x", 2, "after the value");
  expect_refused("// comment\n1", 0, "expected a value");
  expect_refused("tru", 3, "expected 'true'");
  expect_refused("nul1", 3, "expected 'null'");
  expect_refused("NaN", 0, "expected a value");
  expect_refused("\xef\xbb\xbf{}", 0, "expected a value");  // no byte-order mark
  expect_refused("[1]\v", 3, "after the value");            // \v is not JSON whitespace
}

TEST(JsonReader, RefusesBadNumbers) {
  expect_refused("01", 1, "after the value");
  expect_refused("-", 0, "expected a value");
  expect_refused("+1", 0, "expected a value");
  expect_refused("1.", 1, "after the value");
  expect_refused(".5", 0, "expected a value");
  expect_refused("1e", 1, "after the value");
  expect_refused("1e+", 1, "after the value");
  expect_refused("0x10", 1, "after the value");
  expect_refused("Infinity", 0, "expected a value");
  expect_refused("[1, 1e999]", 4, "out of the range");
}

TEST(JsonReader, RefusesBadStrings) {
  expect_refused("\"abc", 4, "unterminated string");
  expect_refused("\"a\nb\"", 2, "control character");
  expect_refused("\"a\tb\"", 2, "control character");
  expect_refused(R"("\x")", 2, "unknown escape");
  expect_refused(R"("\u12G4")", 5, "4 hex digits");
  expect_refused(R"("\u12")", 5, "4 hex digits");
  expect_refused(R"("\ude00")", 1, "low surrogate");
  expect_refused(R"("\ud83d")", 7, "high surrogate");
  expect_refused(R"("\ud83dx")", 7, "high surrogate");
  expect_refused(R"("\ud83d\u0041")", 7, "high surrogate");
}

TEST(JsonReader, RefusesInvalidUtf8) {
  expect_refused("\"\x80\"", 1, "invalid UTF-8 lead");       // a lone continuation byte
  expect_refused("\"\xc0\xaf\"", 1, "invalid UTF-8 lead");   // overlong '/'
  expect_refused("\"\xe0\x80\xaf\"", 2, "continuation");     // overlong, 3 bytes
  expect_refused("\"\xed\xa0\x80\"", 2, "continuation");     // a surrogate, U+D800
  expect_refused("\"\xf4\x90\x80\x80\"", 2, "continuation"); // above U+10FFFF
  expect_refused("\"\xf5\x80\x80\x80\"", 1, "invalid UTF-8 lead");
  expect_refused("\"\xc3\"", 2, "continuation");             // cut short by the quote
  expect_refused("\"\xe2\x82", 3, "truncated UTF-8");
}

TEST(JsonReader, RefusesDuplicateKeys) {
  expect_refused(R"({"a": 1, "b": 2, "a": 3})", 17, "duplicate key \"a\" in an object");
  // a key named in a message keeps the message on one line
  const std::string e = error_of(R"({"a\nb": 1, "a\nb": 2})");
  EXPECT_NE(e.find(R"(duplicate key "a\nb")"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  expect_refused(R"({"x": {"a": 1, "a": 1}})", 15, "duplicate key");
  // the same key after unescaping is the same key
  expect_refused(R"({"a": 1, "\u0061": 2})", 9, "duplicate key");
  EXPECT_NO_THROW(parse_json(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})"));
}

TEST(JsonReader, NestingAtMost64) {
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']')));
  expect_refused(std::string(65, '[') + std::string(65, ']'), 64, "nesting deeper than 64");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"k\":";
  expect_refused(objects + "1" + std::string(65, '}'), 64 * 5, "nesting deeper than 64");
  // a hostile depth far beyond the limit stops at the limit, not at the stack's end
  expect_refused(std::string(1000000, '['), 64, "nesting deeper than 64");
}

}  // namespace
}  // namespace paralab
