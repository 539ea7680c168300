// tests/test_json_document.cpp: every JSON paralab reads goes through nlohmann/json with
// paralab's two rules on top (checkpoint/json_document.h). Valid documents read back exactly
// (nesting, escapes, integers above 2^53, the file's order); each broken rule throws JsonError
// naming the line and the column of the first byte that breaks it; where() names a member's.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include "checkpoint/json.h"
#include "checkpoint/json_document.h"

namespace paralab {
namespace {

// The message JsonDocument gives for text, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    JsonDocument d(text);
  } catch (const JsonError& e) {
    return e.what();
  }
  return "";
}

// Expects a refusal at (line, column) whose message mentions `what`.
void expect_refused(const std::string& text, int line, int column, const std::string& what) {
  const std::string e = error_of(text);
  const std::string prefix =
      "line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
  EXPECT_EQ(e.compare(0, prefix.size(), prefix), 0) << "text: " << text << "\nerror: " << e;
  EXPECT_NE(e.find(what), std::string::npos) << "text: " << text << "\nerror: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(JsonDocument, NestedDocumentInFileOrder) {
  const Json v = JsonDocument(
      " {\"b\": [1, -2.5, 3e2, true, false, null, {}, []],\n\t\"a\": {\"c\": \"d\"}} \r\n").root();
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v.begin().key(), "b");  // file order
  const Json& a = v.at("b");
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(json_int(a[0]), 1);
  EXPECT_EQ(a[1].get<double>(), -2.5);
  EXPECT_EQ(a[2].get<double>(), 300.0);
  EXPECT_THROW(json_int(a[2]), JsonError);  // 3e2 has an exponent
  EXPECT_TRUE(a[3].get<bool>());
  EXPECT_TRUE(a[5].is_null());
  EXPECT_TRUE(a[6].is_object() && a[6].empty());
  EXPECT_EQ(v.at("a").at("c").get<std::string>(), "d");
  EXPECT_EQ(json_find(v, "z"), nullptr);
  EXPECT_EQ(json_find(a, "z"), nullptr);  // not an object
}

TEST(JsonDocument, IntegersReadExactly) {
  EXPECT_EQ(json_int(JsonDocument("9007199254740993").root()), 9007199254740993LL);  // 2^53 + 1
  EXPECT_EQ(json_int(JsonDocument("9223372036854775807").root()), INT64_MAX);
  EXPECT_EQ(json_int(JsonDocument("-9223372036854775808").root()), INT64_MIN);
  EXPECT_EQ(json_int(JsonDocument("-0").root()), 0);
  EXPECT_THROW(json_int(JsonDocument("9223372036854775808").root()), JsonError);  // past int64
  EXPECT_THROW(json_int(JsonDocument("1.0").root()), JsonError);
  EXPECT_THROW(json_int(JsonDocument("1E3").root()), JsonError);
  EXPECT_THROW(json_int(JsonDocument("\"1\"").root()), JsonError);
  EXPECT_EQ(JsonDocument("\"\\ud83d\\ude00\"").root().get<std::string>(), "\xf0\x9f\x98\x80");
}

TEST(JsonDocument, ReadsWhatJsonWriterWrites) {
  JsonWriter w(true);
  w.begin_object().field("name", std::string("tab\there \"q\" \x01"));
  w.field("big", int64_t(1) << 62).field("lr", 3e-4).key("list").begin_array();
  w.value(1).value(2).end_array().end_object();
  const Json v = JsonDocument(w.str()).root();
  EXPECT_EQ(v.at("name").get<std::string>(), "tab\there \"q\" \x01");
  EXPECT_EQ(json_int(v.at("big")), int64_t(1) << 62);
  EXPECT_EQ(v.at("lr").get<double>(), 3e-4);
  EXPECT_EQ(v.at("list").size(), 2u);
}

TEST(JsonDocument, WhereNamesAMembersLineAndColumn) {
  const JsonDocument d("{\n  \"zero_optimization\": {\n    \"stage\": 2,\n    \"x\": [1, {\"y\": 3}]\n  }\n}");
  EXPECT_EQ(d.where("/zero_optimization"), "line 2, column 3");
  EXPECT_EQ(d.where("/zero_optimization/stage"), "line 3, column 5");
  EXPECT_EQ(d.where("/zero_optimization/x/1/y"), "line 4, column 15");
  EXPECT_EQ(d.where("/zero_optimization/x/0"), "line 4, column 5");  // its array's key
  EXPECT_EQ(d.where(""), "line 1, column 1");
  const JsonDocument escaped(R"({"a\"b": 1, "c\\": {"d": 2}})");
  EXPECT_EQ(escaped.where("/a\"b"), "line 1, column 2");
  EXPECT_EQ(escaped.where("/c\\/d"), "line 1, column 21");
}

TEST(JsonDocument, RefusesBrokenSyntax) {
  expect_refused("", 1, 1, "unexpected end of input");
  expect_refused("[1,]", 1, 4, "unexpected ']'");
  expect_refused("{\"a\":1,}", 1, 8, "unexpected '}'");
  expect_refused("{\"a\" 1}", 1, 6, "expected ':'");
  expect_refused("[1 2]", 1, 4, "expected ']'");
  expect_refused("{} {}", 1, 4, "expected end of input");
  expect_refused("[1,\n 2,\n x]", 3, 2, "invalid literal");
  expect_refused("// comment\n1", 1, 1, "invalid literal");
  expect_refused("NaN", 1, 1, "invalid literal");
  expect_refused("01", 1, 2, "expected end of input");
  EXPECT_EQ(error_of("\xef\xbb\xbf{}"), "");  // a byte-order mark is skipped (RFC 8259 allows it)
  expect_refused("[1, 1e999]", 1, 9, "number overflow");
  expect_refused("\"a\nb\"", 1, 3, "control character");
  expect_refused(R"("\ude00")", 1, 7, "surrogate");
  expect_refused("\"\xc0\xaf\"", 1, 2, "ill-formed UTF-8");
  expect_refused("\"\xed\xa0\x80\"", 1, 3, "ill-formed UTF-8");  // a surrogate, U+D800
}

TEST(JsonDocument, RefusesDuplicateKeys) {
  expect_refused(R"({"a": 1, "b": 2, "a": 3})", 1, 18, "the key \"a\" is given twice");
  // a key named in a message keeps the message on one line
  const std::string e = error_of(R"({"a\nb": 1, "a\nb": 2})");
  EXPECT_NE(e.find(R"(the key "a\nb")"), std::string::npos) << e;
  expect_refused("{\"x\": {\"a\": 1,\n \"a\": 1}}", 2, 2, "given twice");
  expect_refused(R"({"a": 1, "\u0061": 2})", 1, 10, "given twice");  // equal once unescaped
  EXPECT_EQ(error_of(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})"), "");
}

TEST(JsonDocument, NestingAtMost64) {
  EXPECT_EQ(error_of(std::string(64, '[') + std::string(64, ']')), "");
  expect_refused(std::string(65, '[') + std::string(65, ']'), 1, 65, "nested more than 64");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"k\":";
  expect_refused(objects + "1" + std::string(65, '}'), 1, 64 * 5 + 1, "nested more than 64");
  // a hostile depth far beyond the limit stops at the limit, not at the stack's end
  expect_refused(std::string(1000000, '['), 1, 65, "nested more than 64");
}

}  // namespace
}  // namespace paralab
