// report/tensorboard.h: TensorBoard's event files, written directly (no TensorFlow, no
// protobuf library): --tensorboard-dir's scalars, read by `tensorboard --logdir DIR`.
//
// An event file is a TFRecord stream: each record is
//   uint64 length | uint32 masked_crc32c(length) | length bytes of data | uint32 masked_crc32c(data)
// (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, tensorflow's
// record_writer), and each record's data is one Event protocol buffer (tensorboard/compat/
// proto/event.proto), encoded here by hand with the three fields a scalar needs:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }        (summary.proto)
// The first event of a file names its version ("brain.Event:2"). A file is named
// events.out.tfevents.<seconds>.<host>.<pid>.paralab, so a resumed run adds a file beside the
// earlier ones, and TensorBoard reads the folder as one run.
//
// defines: TensorBoardWriter, tfrecord_masked_crc, tensorboard_scalar_event
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace paralab {

// The CRC a TFRecord stores: CRC32C, rotated right by 15 and offset (masked), so that a CRC
// of data that holds CRCs does not look like one.
uint32_t tfrecord_masked_crc(const void* data, size_t n);
// The bytes of one Event holding scalars (tag, value) at a step (the record's data).
std::string tensorboard_scalar_event(double wall_time, int64_t step,
                                     const std::vector<std::pair<std::string, float>>& scalars);

class TensorBoardWriter {
 public:
  // Makes the folder (mkdir -p) and a new event file in it. Throws std::runtime_error naming
  // the path when it cannot.
  explicit TensorBoardWriter(const std::string& folder);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // One event with these scalars at `step`, flushed (a killed run keeps what it wrote).
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace paralab
