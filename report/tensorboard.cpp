// report/tensorboard.cpp: see tensorboard.h.
#include "report/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include "checkpoint/file_io.h"  // crc32c, make_folders

namespace paralab {

namespace {

// Event.wall_time: seconds since the Unix epoch (TensorBoard's relative time axis).
double wall_seconds() {
  using clock = std::chrono::system_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Protocol buffers' wire format: a key is (field << 3) | type; type 0 a varint, 1 eight
// bytes, 2 a length and bytes, 5 four bytes; integers little-endian.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += (char)(v | 0x80);
    v >>= 7;
  }
  out += (char)v;
}
void key(std::string& out, int field, int type) { varint(out, (uint64_t)(field << 3 | type)); }
void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}
template <class T>
void fixed_field(std::string& out, int field, T value) {  // double (type 1) or float (5)
  key(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little-endian hosts, as x86 and ARM run
  out.append(raw, sizeof(T));
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  fixed_field(e, 1, wall_time);  // wall_time
  key(e, 2, 0);                  // step
  varint(e, (uint64_t)step);
  return e;
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tensorboard_scalar_event(double wall_time, int64_t step,
                                     const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    bytes_field(v, 1, tag);     // Value.tag
    fixed_field(v, 2, value);   // Value.simple_value
    bytes_field(summary, 1, v); // Summary.value
  }
  std::string e = event_header(wall_time, step);
  bytes_field(e, 5, summary);  // Event.summary
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& folder) {
  make_folders(folder);
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  const double now = wall_seconds();
  path_ = folder + "/events.out.tfevents." + std::to_string((long long)now) + "." + host + "." +
          std::to_string(getpid()) + ".paralab";
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw std::runtime_error("--tensorboard-dir: cannot write " + path_);
  std::string first = event_header(now, 0);
  bytes_field(first, 3, "brain.Event:2");  // Event.file_version
  record(first);
  std::fflush(file_);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::record(const std::string& data) {
  char head[12];
  const uint64_t length = data.size();
  std::memcpy(head, &length, 8);
  const uint32_t length_crc = tfrecord_masked_crc(head, 8);
  std::memcpy(head + 8, &length_crc, 4);
  const uint32_t data_crc = tfrecord_masked_crc(data.data(), data.size());
  if (std::fwrite(head, 1, 12, file_) != 12 ||
      std::fwrite(data.data(), 1, data.size(), file_) != data.size() ||
      std::fwrite(&data_crc, 1, 4, file_) != 4)
    throw std::runtime_error("--tensorboard-dir: cannot write " + path_);
}

void TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, float>>& values) {
  record(tensorboard_scalar_event(wall_seconds(), step, values));
  std::fflush(file_);
}

}  // namespace paralab
