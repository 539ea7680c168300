// tests/test_safetensors.cpp: the safetensors writer and reader (checkpoint/safetensors.h).
// What the writer writes reads back bit for bit (F32, BF16 rounded to nearest even, I32,
// I64, a 0-element tensor, metadata) in the format's exact layout; F16 widens exactly; and
// every rule of the reader, broken by a hand-made file, throws SafetensorsError with one line
// "PATH: <the rule>".
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>
#include "kernels/math.h"  // to_bf16, to_float
#include "checkpoint/file_io.h"
#include "checkpoint/safetensors.h"

namespace paralab {
namespace {

// A file path under /tmp, removed at the end of the test.
class TempPath {
 public:
  TempPath() {
    char name[] = "/tmp/paralab_safetensors_XXXXXX";
    close(mkstemp(name));
    path_ = std::string(name) + ".safetensors";
    std::remove(name);
  }
  ~TempPath() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A hand-made file: the length field (N = header's size unless given), the header, the buffer.
std::string file_of(const std::string& header, const std::string& buffer, int64_t n = -1) {
  return le64(n >= 0 ? static_cast<uint64_t>(n) : header.size()) + header + buffer;
}

// The message SafetensorsReader gives for a file of these bytes ("" when it opens).
std::string reader_error(const std::string& bytes, std::string* path_out = nullptr) {
  TempPath p;
  std::ofstream(p.path(), std::ios::binary) << bytes;
  if (path_out) *path_out = p.path();
  try {
    SafetensorsReader r(p.path());
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

// The reader refuses the file: one line, "PATH: ..." mentioning `rule`.
void expect_refused(const std::string& bytes, const std::string& rule) {
  std::string path;
  const std::string e = reader_error(bytes, &path);
  EXPECT_EQ(e.compare(0, path.size() + 2, path + ": "), 0) << "error: " << e;
  EXPECT_NE(e.find(rule), std::string::npos) << "error: " << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "error: " << e;
}

std::string entry(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(Safetensors, RoundTrip) {
  TempPath p;
  SafetensorsWriter w;
  const std::vector<float> f32 = {1.0f, -2.5f, 3.14159265f, 1e-30f, -0.0f, 65504.0f};
  w.add_floats("f32", {2, 3}, f32);
  // bf16 keeps 8 significant bits; halfway cases go to the even mantissa
  const std::vector<float> bf16_in = {1.0f, 1.00390625f, 1.01171875f, 3.14159265f, -2.5f, 1e10f};
  const std::vector<float> bf16_out = {1.0f, 1.0f, 1.015625f, 3.140625f, -2.5f, 9999220736.0f};
  w.add_floats("bf16", {6}, bf16_in, SafeDType::BF16);
  const std::vector<int32_t> i32 = {-1, 0, 2147483647};
  w.add("i32", SafeDType::I32, {3}, i32.data(), 12);
  const std::vector<int64_t> i64 = {INT64_MIN, 9007199254740993LL};
  w.add("i64", SafeDType::I64, {1, 2}, i64.data(), 16);
  w.add_floats("empty", {0, 4}, {});
  w.set_metadata("format", "np");
  w.set_metadata("format", "pt");  // replaces
  w.set_metadata("note", "caf\xc3\xa9 \"quoted\"\n");
  EXPECT_EQ(w.count(), 5u);
  EXPECT_EQ(w.payload_bytes(), 24u + 12 + 12 + 16);
  const SafetensorsWriter::Written written = w.write(p.path());

  uint64_t bytes = 0;
  EXPECT_EQ(written.crc32c, crc32c_file(p.path(), &bytes));
  EXPECT_EQ(written.file_bytes, bytes);
  EXPECT_EQ(written.payload_bytes, 64u);

  SafetensorsReader r(p.path());
  const SafetensorsHeader& h = r.header();
  ASSERT_EQ(h.tensors.size(), 5u);
  ASSERT_EQ(h.metadata.size(), 2u);
  EXPECT_EQ(*h.meta("format"), "pt");
  EXPECT_EQ(*h.meta("note"), "caf\xc3\xa9 \"quoted\"\n");
  EXPECT_EQ(h.meta("absent"), nullptr);
  EXPECT_EQ(h.find("absent"), nullptr);

  const SafeTensor& a = *h.find("f32");
  EXPECT_EQ(a.dtype, SafeDType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  const std::vector<float> back = r.read_floats(a);
  ASSERT_EQ(back.size(), f32.size());
  EXPECT_EQ(std::memcmp(back.data(), f32.data(), 24), 0) << "F32 must round-trip bit for bit";
  EXPECT_EQ(r.read_floats(*h.find("bf16")), bf16_out);

  std::vector<int32_t> i32_back(3);
  r.read(*h.find("i32"), 0, 12, i32_back.data());
  EXPECT_EQ(i32_back, i32);
  int64_t second = 0;
  r.read(*h.find("i64"), 8, 8, &second);  // a part of a tensor
  EXPECT_EQ(second, 9007199254740993LL);
  const SafeTensor& e = *h.find("empty");
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.begin, e.end);
  EXPECT_TRUE(r.read_floats(e).empty());
}

TEST(Safetensors, ExactLayout) {
  TempPath p;
  SafetensorsWriter w;
  w.add_floats("b", {2}, {1.0f, 2.0f});
  w.add_floats("a", {1}, {3.0f}, SafeDType::BF16);
  w.set_metadata("format", "pt");
  w.write(p.path());
  const std::string file = slurp(p.path());

  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[8,10]}}";
  const size_t n = (json.size() + 7) / 8 * 8;
  ASSERT_EQ(file.size(), 8 + n + 10);
  EXPECT_EQ(file.substr(0, 8), le64(n));
  EXPECT_EQ(file.substr(8, json.size()), json);
  EXPECT_EQ(file.substr(8 + json.size(), n - json.size()), std::string(n - json.size(), ' '));
  // the buffer: 1.0f, 2.0f little-endian, then bf16(3.0) = 0x4040
  EXPECT_EQ(file.substr(8 + n), std::string("\0\0\x80\x3f\0\0\0\x40\x40\x40", 10));

  SafetensorsReader r(p.path());
  EXPECT_EQ(r.header().data_start, 8 + n);
  EXPECT_EQ(r.header().tensors[0].name, "b");  // buffer order
  EXPECT_EQ(r.header().tensors[1].name, "a");
}

TEST(Safetensors, HalfWidensExactly) {
  TempPath p;
  const std::vector<uint16_t> half = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x0400, 0x7BFF,
                                      0x3555, 0x8000, 0x7C00, 0xFC00, 0x7E00};
  SafetensorsWriter w;
  w.add("h", SafeDType::F16, {11}, half.data(), 22);
  w.write(p.path());
  SafetensorsReader r(p.path());
  const std::vector<float> f = r.read_floats(r.header().tensors[0]);
  ASSERT_EQ(f.size(), 11u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], std::ldexp(1.0f, -24));         // the smallest subnormal
  EXPECT_EQ(f[3], std::ldexp(1023.0f, -24));      // the largest subnormal
  EXPECT_EQ(f[4], std::ldexp(1.0f, -14));         // the smallest normal
  EXPECT_EQ(f[5], 65504.0f);                      // the largest
  EXPECT_EQ(f[6], 0.333251953125f);
  EXPECT_TRUE(f[7] == 0.0f && std::signbit(f[7]));
  EXPECT_EQ(f[8], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f[9], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f[10]));
}

TEST(Safetensors, LargeTensorReadsInChunks) {
  TempPath p;
  std::vector<float> v(700000);  // 2.8 MB: more than one read
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  SafetensorsWriter w;
  w.add_floats("big", {700, 1000}, v, SafeDType::BF16);
  w.add_floats("big32", {700000}, v);
  w.add_floats("big16", {700000}, v, SafeDType::F16);  // --fp16's parameters; past 65504: inf
  w.write(p.path());
  SafetensorsReader r(p.path());
  const std::vector<float> b = r.read_floats(*r.header().find("big"));
  ASSERT_EQ(b.size(), v.size());
  for (size_t i = 0; i < v.size(); i += 9973)
    EXPECT_EQ(b[i], kernels::to_float(kernels::to_bf16(v[i]))) << i;
  EXPECT_EQ(r.read_floats(*r.header().find("big32")), v);
  const std::vector<float> h = r.read_floats(*r.header().find("big16"));
  for (size_t i = 0; i < v.size(); i += 9973)
    EXPECT_EQ(h[i], kernels::to_float(kernels::to_fp16(v[i]))) << i;
  EXPECT_TRUE(std::isinf(h.back()));
}

TEST(Safetensors, ReaderRefusesWhatItCannotRead) {
  TempPath p;
  SafetensorsWriter w;
  const std::vector<int32_t> i32 = {1, 2};
  w.add("ids", SafeDType::I32, {2}, i32.data(), 8);
  w.write(p.path());
  SafetensorsReader r(p.path());
  const SafeTensor& t = r.header().tensors[0];
  try {
    r.read_floats(t);
    FAIL() << "read I32 as floats";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()),
              p.path() + ": tensor \"ids\" is I32, not a float dtype (F32, BF16 or F16)");
  }
  int32_t out[3];
  EXPECT_THROW(r.read(t, 4, 8, out), SafetensorsError);
  EXPECT_THROW(r.read(t, 9, 0, out), SafetensorsError);
  EXPECT_THROW(r.read(t, 4, UINT64_MAX, out), SafetensorsError);  // offset + n wraps
  EXPECT_NO_THROW(r.read(t, 8, 0, out));
  try {
    SafetensorsReader absent(p.path() + ".absent");
    FAIL() << "opened a file that does not exist";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).find(p.path() + ".absent: cannot open"), 0u) << e.what();
  }
}

TEST(Safetensors, WriterRefusesBadTensors) {
  SafetensorsWriter w;
  const float x[2] = {1, 2};
  EXPECT_THROW(w.add("x", SafeDType::F32, {3}, x, 8), std::invalid_argument);
  EXPECT_THROW(w.add("x", SafeDType::F32, {-2}, x, 8), std::invalid_argument);
  EXPECT_THROW(w.add("", SafeDType::F32, {2}, x, 8), std::invalid_argument);
  EXPECT_THROW(w.add("__metadata__", SafeDType::F32, {2}, x, 8), std::invalid_argument);
  EXPECT_THROW(w.add("bad\xff", SafeDType::F32, {2}, x, 8), std::invalid_argument);
  EXPECT_THROW(w.add("x", SafeDType::U8, {1LL << 32, 1LL << 32}, x, 0), std::invalid_argument);
  EXPECT_THROW(w.add_floats("x", {3}, {1, 2}), std::invalid_argument);
  EXPECT_THROW(w.add_floats("x", {2}, {1, 2}, SafeDType::F64), std::invalid_argument);
  EXPECT_THROW(w.set_metadata("k", "\xc0\xaf"), std::invalid_argument);
  EXPECT_EQ(w.count(), 0u);
  TempPath p;
  w.add("x", SafeDType::F32, {2}, x, 8);
  w.add("x", SafeDType::F32, {2}, x, 8);
  EXPECT_THROW(w.write(p.path()), std::invalid_argument);
  EXPECT_NE(access(p.path().c_str(), F_OK), 0) << "a file with a duplicate name was written";
}

// ---- one hand-made file per rule of the reader ---------------------------------------------

const std::string kBuffer8(8, '\x01');  // the buffer of one F32 [2] tensor

TEST(SafetensorsRules, TruncatedBelowTheLength) {
  expect_refused("", "a file of 0 bytes is shorter than the 8-byte header length");
  expect_refused(std::string("\x10\0\0\0\0", 5), "a file of 5 bytes is shorter than the 8-byte");
}

TEST(SafetensorsRules, HeaderAboveTheLimit) {
  expect_refused(file_of("{}", "", 100000001),
                 "header length 100000001 is above the format's limit");
  expect_refused(file_of("{}", "", INT64_MAX), "is above the format's limit");
}

TEST(SafetensorsRules, HeaderPastTheEnd) {
  expect_refused(file_of("{}", "", 100), "header length 100 runs past the end of the 10-byte file");
}

TEST(SafetensorsRules, HeaderStartsWithABrace) {
  expect_refused(file_of(" {}", ""), "does not start with '{'");
  expect_refused(file_of("[]", ""), "does not start with '{'");
  expect_refused(file_of("", ""), "does not start with '{'");
}

TEST(SafetensorsRules, HeaderIsStrictJson) {
  expect_refused(file_of("{\"a\":}", ""),
                 "the header (from file byte 8) is not strict JSON: line 1, column 6: syntax "
                 "error while parsing value - unexpected '}'");
  expect_refused(file_of("{}x", ""), "not strict JSON");
  expect_refused(file_of("{\"a\":{},}", ""), "not strict JSON");
  // padding with spaces is the format's own; the reader accepts it
  EXPECT_EQ(reader_error(file_of("{}      ", "")), "");
}

TEST(SafetensorsRules, UnknownDtype) {
  expect_refused(file_of("{\"t\":" + entry("Q8", "[2]", "[0,8]") + "}", kBuffer8),
                 "tensor \"t\" has an unknown dtype \"Q8\"");
  expect_refused(file_of("{\"t\":" + entry("f32", "[2]", "[0,8]") + "}", kBuffer8),
                 "unknown dtype");
}

TEST(SafetensorsRules, ShapeOfNonNegativeIntegers) {
  expect_refused(file_of("{\"t\":" + entry("F32", "[-2]", "[0,8]") + "}", kBuffer8),
                 "tensor \"t\": a shape dimension is negative");
  expect_refused(file_of("{\"t\":" + entry("F32", "[2.0]", "[0,8]") + "}", kBuffer8),
                 "tensor \"t\": a shape dimension is not an integer");
  expect_refused(file_of("{\"t\":" + entry("F32", "[\"2\"]", "[0,8]") + "}", kBuffer8),
                 "a shape dimension is not an integer");
  expect_refused(file_of("{\"t\":" + entry("F32", "2", "[0,8]") + "}", kBuffer8),
                 "shape is not an array");
}

TEST(SafetensorsRules, EntryHoldsExactlyItsThreeKeys) {
  expect_refused(file_of("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", kBuffer8),
                 "tensor \"t\" has no data_offsets");
  expect_refused(file_of("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                         "\"x\":1}}", kBuffer8),
                 "unknown key \"x\"");
  expect_refused(file_of("{\"t\":[1]}", kBuffer8), "tensor \"t\" is not an object");
}

TEST(SafetensorsRules, DataOffsets) {
  const auto one = [](const std::string& offsets, const std::string& buffer) {
    return file_of("{\"t\":" + entry("F32", "[2]", offsets) + "}", buffer);
  };
  expect_refused(one("[0]", kBuffer8), "data_offsets is not an array of two integers");
  expect_refused(one("[0,4,8]", kBuffer8), "data_offsets is not an array of two integers");
  expect_refused(one("[0,-8]", kBuffer8), "data_offsets' end is negative");
  expect_refused(one("[0,8.0]", kBuffer8), "data_offsets' end is not an integer");
  expect_refused(one("[8,0]", kBuffer8), "data_offsets' begin 8 is after its end 0");
  expect_refused(one("[0,4]", std::string(4, 'x')),
                 "data_offsets span 4 bytes, but its shape and dtype need 8");
  expect_refused(one("[0,8]", std::string(4, 'x')), "is past the end of the 4-byte buffer");
  expect_refused(one("[0,18446744073709551615]", kBuffer8), "data_offsets' end is not an integer");
  expect_refused(one("[0,8]", std::string(12, 'x')),
                 "the tensors cover 8 bytes of the 12-byte buffer");
  const std::string a = "\"a\":" + entry("F32", "[2]", "[0,8]");
  expect_refused(file_of("{" + a + ",\"b\":" + entry("F32", "[2]", "[12,20]") + "}",
                         std::string(20, 'x')),
                 "a gap: bytes [8, 12) of the buffer belong to no tensor");
  expect_refused(file_of("{" + a + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}",
                         std::string(12, 'x')),
                 "tensor \"b\" overlaps the tensor before it");
  // listed out of order is fine: the buffer order is by begin
  EXPECT_EQ(reader_error(file_of("{\"b\":" + entry("F32", "[2]", "[8,16]") + "," + a + "}",
                                 std::string(16, 'x'))), "");
  // 0-byte tensors sit anywhere inside, even several at one offset
  EXPECT_EQ(reader_error(file_of("{\"z\":" + entry("F32", "[0]", "[8,8]") + "," + a + ",\"y\":" +
                                 entry("I64", "[3,0]", "[8,8]") + "}", kBuffer8)), "");
}

TEST(SafetensorsRules, SizeOverflowIsCaught) {
  // 2^32 x 2^32 x 1 byte wraps to 0 in 64 bits: it must not pass as a 0-byte tensor
  expect_refused(file_of("{\"t\":" + entry("U8", "[4294967296,4294967296]", "[0,0]") + "}", ""),
                 "its shape and dtype need more than 2^64");
  expect_refused(file_of("{\"t\":" + entry("F32", "[9223372036854775807,2]", "[0,0]") + "}", ""),
                 "more than 2^64");
}

TEST(SafetensorsRules, NamesUniqueAndNotEmpty) {
  const std::string e = entry("F32", "[2]", "[0,8]");
  expect_refused(file_of("{\"a\":" + e + ",\"a\":" + e + "}", kBuffer8), "the key \"a\" is given twice");
  expect_refused(file_of("{\"\":" + e + "}", kBuffer8), "a tensor has an empty name");
}

TEST(SafetensorsRules, MetadataOfStrings) {
  const std::string t = ",\"t\":" + entry("F32", "[2]", "[0,8]") + "}";
  expect_refused(file_of("{\"__metadata__\":{\"k\":1}" + t, kBuffer8),
                 "__metadata__ value of \"k\" is not a string");
  expect_refused(file_of("{\"__metadata__\":[]" + t, kBuffer8), "__metadata__ is not an object");
  EXPECT_EQ(reader_error(file_of("{\"__metadata__\":{}" + t, kBuffer8)), "");
}

TEST(SafetensorsRules, HostileNamesStayOnOneLine) {
  const std::string name = "line\\nbreak" + std::string(500, 'x');
  const std::string bytes =
      file_of("{\"" + name + "\":" + entry("F32", "[2]", "[0,4]") + "}", kBuffer8);
  expect_refused(bytes, "tensor \"line\\nbreak");
  const std::string e = reader_error(bytes);
  EXPECT_LT(e.size(), 400u) << "a long name is cut in the message";
}

TEST(SafetensorsRules, ParseChecksWithoutAFileName) {
  const std::string bytes = file_of("{}", "");
  const uint8_t* b = reinterpret_cast<const uint8_t*>(bytes.data());
  EXPECT_NO_THROW(parse_safetensors_header(b, bytes.size(), bytes.size()));
  try {
    parse_safetensors_header(b, 4, bytes.size());
    FAIL() << "parsed 4 bytes";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()), "a file of 4 bytes is shorter than the 8-byte header length");
  }
  EXPECT_THROW(parse_safetensors_header(b, 9, bytes.size()), SafetensorsError);  // header cut
}

}  // namespace
}  // namespace paralab
