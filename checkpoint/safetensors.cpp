// checkpoint/safetensors.cpp: the format's every rule, checked before a tensor is read, and the
// writer that follows them (the format is in safetensors.h).
//
// Every size is computed in uint64 with its overflow checked (a hostile header may claim a
// shape whose product wraps around to the size of its data_offsets):
//   bytes(t) = prod(shape) x dtype_bytes,   data_start = 8 + N,   buffer = file size - 8 - N.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
// defines: to_bf16, to_float (bf16 <-> float, the trainer's own rounding)
#include "kernels/math.h"
// defines: AtomicFile
#include "checkpoint/file_io.h"
// defines: JsonWriter
#include "checkpoint/json.h"
// defines: Json, JsonDocument, JsonError, json_int
#include "checkpoint/json_document.h"

namespace paralab {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100000000;  // the format's limit on N
constexpr char kMetadataKey[] = "__metadata__";

struct DTypeInfo {
  SafeDType dtype;
  const char* name;
  size_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {SafeDType::BOOL, "BOOL", 1},       {SafeDType::U8, "U8", 1},   {SafeDType::I8, "I8", 1},
    {SafeDType::F8_E5M2, "F8_E5M2", 1}, {SafeDType::F8_E4M3, "F8_E4M3", 1},
    {SafeDType::I16, "I16", 2},         {SafeDType::U16, "U16", 2}, {SafeDType::F16, "F16", 2},
    {SafeDType::BF16, "BF16", 2},       {SafeDType::I32, "I32", 4}, {SafeDType::U32, "U32", 4},
    {SafeDType::F32, "F32", 4},         {SafeDType::F64, "F64", 8}, {SafeDType::I64, "I64", 8},
    {SafeDType::U64, "U64", 8}};

const DTypeInfo& info(SafeDType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i;
  throw std::invalid_argument("not a safetensors dtype");
}

[[noreturn]] void refuse(const std::string& rule) { throw SafetensorsError(rule); }

// A name as JSON writes it, cut to a readable length: a hostile name may hold newlines (the
// message must stay one line) or be megabytes long.
std::string quoted(const std::string& name) {
  constexpr size_t kShown = 120;
  std::string s = name;
  if (s.size() > kShown) {
    size_t cut = kShown;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    s = s.substr(0, cut) + "...";
  }
  return JsonWriter().value(s).str();
}

// Product of the shape times the element size, or false when it does not fit in uint64.
bool byte_size(const std::vector<int64_t>& shape, size_t element, uint64_t* out) {
  uint64_t n = element;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *out = n;
  return true;
}

// A header integer that must be >= 0; `what` names it in the message.
int64_t non_negative(const Json& v, const std::string& what) {
  int64_t n;
  try {
    n = json_int(v);
  } catch (const JsonError&) {
    refuse(what + " is not an integer");
  }
  if (n < 0) refuse(what + " is negative (" + std::to_string(n) + ")");
  return n;
}

SafeTensor tensor_entry(const std::string& name, const Json& entry) {
  const std::string at = "tensor " + quoted(name);
  if (name.empty()) refuse("a tensor has an empty name");
  if (!entry.is_object()) refuse(at + " is not an object");
  for (const auto& m : entry.items())
    if (m.key() != "dtype" && m.key() != "shape" && m.key() != "data_offsets")
      refuse(at + " has the unknown key " + quoted(m.key()) +
             " (an entry holds exactly dtype, shape and data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) refuse(at + " has no " + key);
  const Json& dtype = entry.at("dtype");
  const Json& shape = entry.at("shape");
  const Json& offsets = entry.at("data_offsets");

  SafeTensor t;
  t.name = name;
  if (!dtype.is_string() || !parse_dtype(dtype.get<std::string>(), &t.dtype))
    refuse(at + " has an unknown dtype" +
           (dtype.is_string() ? " " + quoted(dtype.get<std::string>()) : ""));
  if (!shape.is_array()) refuse(at + ": shape is not an array");
  for (const Json& d : shape)
    t.shape.push_back(non_negative(d, at + ": a shape dimension"));
  if (!offsets.is_array() || offsets.size() != 2)
    refuse(at + ": data_offsets is not an array of two integers [begin, end]");
  const Json& range = offsets;
  t.begin = static_cast<uint64_t>(non_negative(range[0], at + ": data_offsets' begin"));
  t.end = static_cast<uint64_t>(non_negative(range[1], at + ": data_offsets' end"));
  if (t.begin > t.end)
    refuse(at + ": data_offsets' begin " + std::to_string(t.begin) + " is after its end " +
           std::to_string(t.end));
  uint64_t bytes = 0;
  const bool fits = byte_size(t.shape, dtype_bytes(t.dtype), &bytes);
  if (!fits || bytes != t.end - t.begin)
    refuse(at + ": data_offsets span " + std::to_string(t.end - t.begin) +
           " bytes, but its shape and dtype need " +
           (fits ? std::to_string(bytes) : "more than 2^64"));
  return t;
}

// Sorted by begin, the tensors must tile [0, buffer) exactly: each starts where the one
// before it ended (a 0-byte tensor sorts before a larger one at its offset).
void check_tiling(std::vector<SafeTensor>& tensors, uint64_t buffer) {
  for (const SafeTensor& t : tensors)
    if (t.end > buffer)
      refuse("tensor " + quoted(t.name) + ": data_offsets' end " + std::to_string(t.end) +
             " is past the end of the " + std::to_string(buffer) + "-byte buffer");
  std::sort(tensors.begin(), tensors.end(), [](const SafeTensor& a, const SafeTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const SafeTensor& t : tensors) {
    if (t.begin > covered)
      refuse("a gap: bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
             ") of the buffer belong to no tensor (tensor " + quoted(t.name) +
             " begins after them)");
    if (t.begin < covered)
      refuse("tensor " + quoted(t.name) + " overlaps the tensor before it (begins at " +
             std::to_string(t.begin) + ", the one before ends at " + std::to_string(covered) +
             ")");
    covered = t.end;
  }
  if (covered != buffer)
    refuse("the tensors cover " + std::to_string(covered) + " bytes of the " +
           std::to_string(buffer) + "-byte buffer (the rest belongs to no tensor)");
}

// A float's bits as stored in `as` (F32, or rounded to nearest even into BF16 or F16).
uint32_t float_bits(float v, SafeDType as) {
  if (as == SafeDType::BF16) return kernels::to_bf16(v).bits;
  if (as == SafeDType::F16) return kernels::to_fp16(v).bits;
  return kernels::float_to_bits(v);
}

// Bytes built one by one: the file is little-endian whatever the host is (F32 on a
// little-endian host, every machine paralab runs on, is copied as is).
constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
uint64_t load_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
void store_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// A name or metadata string that the strict reader would refuse (invalid UTF-8) must not be
// written: the writer's JSON string of it goes through that reader.
void check_utf8(const std::string& s, const char* what) {
  try {
    JsonDocument(JsonWriter().value(s).str());
  } catch (const JsonError&) {
    throw std::invalid_argument(std::string(what) + " " + quoted(s) + " is not valid UTF-8");
  }
}

// pread until n bytes are in: pread may return fewer (a signal, a network file system).
void pread_all(int fd, const std::string& path, uint64_t at, uint64_t n, void* out,
               const std::string& what) {
  uint8_t* p = static_cast<uint8_t*>(out);
  for (uint64_t done = 0; done < n;) {
    const ssize_t got = pread(fd, p + done, static_cast<size_t>(n - done),
                              static_cast<off_t>(at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw SafetensorsError(path + ": cannot read " + what + " (" + std::strerror(errno) + ")");
    if (got == 0)
      throw SafetensorsError(path + ": the file ended while reading " + what +
                             " (it shrank after it was opened?)");
    done += static_cast<uint64_t>(got);
  }
}

}  // namespace

size_t dtype_bytes(SafeDType d) { return info(d).bytes; }
const char* dtype_name(SafeDType d) { return info(d).name; }

bool parse_dtype(const std::string& name, SafeDType* out) {
  for (const DTypeInfo& i : kDTypes)
    if (name == i.name) {
      *out = i.dtype;
      return true;
    }
  return false;
}

const SafeTensor* SafetensorsHeader::find(const std::string& name) const {
  for (const SafeTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const std::string* SafetensorsHeader::meta(const std::string& key) const {
  for (const auto& m : metadata)
    if (m.first == key) return &m.second;
  return nullptr;
}

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t available,
                                           uint64_t file_size) {
  if (file_size < 8 || available < 8)
    refuse("a file of " + std::to_string(std::min<uint64_t>(file_size, available)) +
           " bytes is shorter than the 8-byte header length");
  const uint64_t n = load_le(bytes, 8);
  if (n > kMaxHeaderBytes)
    refuse("header length " + std::to_string(n) + " is above the format's limit of " +
           std::to_string(kMaxHeaderBytes) + " bytes");
  if (8 + n > file_size)
    refuse("header length " + std::to_string(n) + " runs past the end of the " +
           std::to_string(file_size) + "-byte file");
  if (available < 8 + n)
    refuse("only " + std::to_string(available) + " of the header's " + std::to_string(8 + n) +
           " bytes were read");
  if (n == 0 || bytes[8] != '{') refuse("the header does not start with '{'");

  Json root;
  try {
    root = JsonDocument(std::string(reinterpret_cast<const char*>(bytes + 8), n)).root();
  } catch (const JsonError& e) {
    refuse(std::string("the header (from file byte 8) is not strict JSON: ") + e.what());
  }
  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (const auto& m : root.items()) {
    if (m.key() != kMetadataKey) {
      h.tensors.push_back(tensor_entry(m.key(), m.value()));
      continue;
    }
    if (!m.value().is_object()) refuse("__metadata__ is not an object");
    for (const auto& kv : m.value().items()) {
      if (!kv.value().is_string())
        refuse("__metadata__ value of " + quoted(kv.key()) + " is not a string");
      h.metadata.emplace_back(kv.key(), kv.value().get<std::string>());
    }
  }
  check_tiling(h.tensors, file_size - h.data_start);
  return h;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw SafetensorsError(path + ": cannot open (" + std::strerror(errno) + ")");
  try {
    struct stat st;
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      throw SafetensorsError(path + ": not a regular file");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    // Read the length, then the header it announces when that is within the rules (the
    // parser refuses the rest on the first 8 bytes alone).
    std::vector<uint8_t> head(std::min<uint64_t>(size, 8));
    pread_all(fd_, path, 0, head.size(), head.data(), "the header length");
    if (head.size() == 8) {
      const uint64_t n = load_le(head.data(), 8);
      if (n <= kMaxHeaderBytes && 8 + n <= size) {
        head.resize(8 + n);
        pread_all(fd_, path, 8, n, head.data() + 8, "the header");
      }
    }
    try {
      header_ = parse_safetensors_header(head.data(), head.size(), size);
    } catch (const SafetensorsError& e) {
      throw SafetensorsError(path + ": " + e.what());
    }
  } catch (...) {
    close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() { close(fd_); }

void SafetensorsReader::read(const SafeTensor& t, uint64_t offset, uint64_t n, void* out) const {
  const uint64_t size = t.end - t.begin;
  if (offset > size || n > size - offset)
    throw SafetensorsError(path_ + ": tensor " + quoted(t.name) + ": bytes [" +
                           std::to_string(offset) + ", +" + std::to_string(n) +
                           ") are outside its " + std::to_string(size) + " bytes");
  pread_all(fd_, path_, header_.data_start + t.begin + offset, n, out, "tensor " + quoted(t.name));
}

std::vector<float> SafetensorsReader::read_floats(const SafeTensor& t) const {
  if (t.dtype != SafeDType::F32 && t.dtype != SafeDType::BF16 && t.dtype != SafeDType::F16)
    throw SafetensorsError(path_ + ": tensor " + quoted(t.name) + " is " + dtype_name(t.dtype) +
                           ", not a float dtype (F32, BF16 or F16)");
  const int width = static_cast<int>(dtype_bytes(t.dtype));
  const uint64_t count = (t.end - t.begin) / static_cast<uint64_t>(width);
  std::vector<float> values(count);
  if (t.dtype == SafeDType::F32 && kLittleEndianHost) {
    read(t, 0, count * width, values.data());
    return values;
  }
  // Through a bounded buffer, so that a large tensor is never held twice.
  std::vector<uint8_t> chunk(std::min<uint64_t>(count * width, 1u << 20));
  for (uint64_t first = 0; first < count;) {
    const uint64_t n = std::min<uint64_t>(count - first, chunk.size() / width);
    read(t, first * width, n * width, chunk.data());
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t bits = load_le(chunk.data() + i * width, width);
      float& v = values[first + i];
      if (t.dtype == SafeDType::F32) v = kernels::bits_to_float(static_cast<uint32_t>(bits));
      else if (t.dtype == SafeDType::BF16)
        v = kernels::to_float(kernels::bf16{static_cast<uint16_t>(bits)});
      else v = kernels::to_float(kernels::fp16{static_cast<uint16_t>(bits)});
    }
    first += n;
  }
  return values;
}

void SafetensorsWriter::add(const std::string& name, SafeDType dtype,
                            const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  const std::string at = "safetensors tensor " + quoted(name);
  if (name.empty()) throw std::invalid_argument("safetensors: a tensor needs a name");
  if (name == kMetadataKey) throw std::invalid_argument(at + ": the name is the format's own key");
  check_utf8(name, "safetensors tensor name");
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument(at + ": a negative dimension");
  uint64_t need = 0;
  const bool fits = byte_size(shape, dtype_bytes(dtype), &need);
  if (!fits || need != bytes)
    throw std::invalid_argument(at + ": " + std::to_string(bytes) + " bytes given, its shape and " +
                                dtype_name(dtype) + " need " +
                                (fits ? std::to_string(need) : "more than 2^64"));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  tensors_.push_back(Entry{name, dtype, shape, std::vector<uint8_t>(p, p + bytes)});
}

void SafetensorsWriter::add_floats(const std::string& name, const std::vector<int64_t>& shape,
                                   const std::vector<float>& values, SafeDType as) {
  if (as != SafeDType::F32 && as != SafeDType::BF16 && as != SafeDType::F16)
    throw std::invalid_argument("safetensors tensor " + quoted(name) +
                                ": floats are stored as F32, BF16 or F16, not " + dtype_name(as));
  if (as == SafeDType::F32 && kLittleEndianHost) {  // already the file's bytes
    add(name, as, shape, values.data(), values.size() * sizeof(float));
    return;
  }
  const int width = static_cast<int>(dtype_bytes(as));
  std::vector<uint8_t> bytes(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = float_bits(values[i], as);
    store_le(bytes.data() + i * width, bits, width);
  }
  add(name, as, shape, bytes.data(), bytes.size());
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  check_utf8(key, "safetensors metadata key");
  check_utf8(value, "safetensors metadata value");
  for (auto& m : metadata_)
    if (m.first == key) {
      m.second = value;
      return;
    }
  metadata_.emplace_back(key, value);
}

uint64_t SafetensorsWriter::payload_bytes() const {
  uint64_t total = 0;
  for (const Entry& e : tensors_) total += e.data.size();
  return total;
}

SafetensorsStream::SafetensorsStream(
    const std::string& path, const std::vector<Tensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata)
    : file_(path) {
  // Names unique: sorted, equal names sit side by side (a scan per tensor would be quadratic).
  std::vector<const std::string*> names;
  for (const Tensor& t : tensors) {
    const std::string at = "safetensors tensor " + quoted(t.name);
    if (t.name.empty()) throw std::invalid_argument("safetensors: a tensor needs a name");
    if (t.name == kMetadataKey) throw std::invalid_argument(at + ": the name is the format's own key");
    check_utf8(t.name, "safetensors tensor name");
    for (int64_t d : t.shape)
      if (d < 0) throw std::invalid_argument(at + ": a negative dimension");
    names.push_back(&t.name);
  }
  std::sort(names.begin(), names.end(),
            [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i)
    if (*names[i] == *names[i - 1])
      throw std::invalid_argument(path + ": tensor " + quoted(*names[i]) + " added twice");

  JsonWriter j;
  j.begin_object();
  if (!metadata.empty()) {
    j.key(kMetadataKey).begin_object();
    for (const auto& m : metadata) j.field(m.first, m.second);
    j.end_object();
  }
  for (const Tensor& t : tensors) {
    uint64_t bytes = 0;
    if (!byte_size(t.shape, dtype_bytes(t.dtype), &bytes))
      throw std::invalid_argument("safetensors tensor " + quoted(t.name) + ": more than 2^64 bytes");
    j.key(t.name).begin_object().field("dtype", dtype_name(t.dtype)).key("shape").begin_array();
    for (int64_t d : t.shape) j.value(d);
    j.end_array().key("data_offsets").begin_array().value(static_cast<int64_t>(payload_));
    payload_ += bytes;
    j.value(static_cast<int64_t>(payload_)).end_array().end_object();
  }
  j.end_object();
  std::string header = j.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  if (header.size() > kMaxHeaderBytes)
    throw std::runtime_error(path + ": a header of " + std::to_string(header.size()) +
                             " bytes is above the format's limit of " +
                             std::to_string(kMaxHeaderBytes));
  uint8_t length[8];
  store_le(length, header.size(), 8);
  file_.write(length, 8);
  file_.write(header);
}

void SafetensorsStream::write(const void* data, size_t bytes) {
  file_.write(data, bytes);
  written_ += bytes;
}

void SafetensorsStream::write_floats(const float* values, size_t count, SafeDType as) {
  if (as == SafeDType::F32 && kLittleEndianHost) return write(values, count * sizeof(float));
  if (as != SafeDType::F32 && as != SafeDType::BF16 && as != SafeDType::F16)
    throw std::invalid_argument(
        std::string("safetensors: floats are stored as F32, BF16 or F16, not ") + dtype_name(as));
  const int width = static_cast<int>(dtype_bytes(as));
  std::vector<uint8_t> bytes(std::min<size_t>(count, 1u << 18) * width);  // bounded
  for (size_t first = 0; first < count;) {
    const size_t n = std::min(count - first, bytes.size() / width);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = float_bits(values[first + i], as);
      store_le(bytes.data() + i * width, bits, width);
    }
    write(bytes.data(), n * width);
    first += n;
  }
}

SafetensorsStream::Written SafetensorsStream::commit() {
  if (written_ != payload_)
    throw std::logic_error("SafetensorsStream: " + std::to_string(written_) +
                           " bytes written, the header declares " + std::to_string(payload_));
  file_.commit();
  return Written{file_.bytes(), payload_, file_.crc()};
}

SafetensorsWriter::Written SafetensorsWriter::write(const std::string& path) const {
  std::vector<SafetensorsStream::Tensor> declared;
  for (const Entry& e : tensors_) declared.push_back({e.name, e.dtype, e.shape});
  SafetensorsStream stream(path, declared, metadata_);
  for (const Entry& e : tensors_) stream.write(e.data.data(), e.data.size());
  return stream.commit();
}

}  // namespace paralab
