// tests/test_resume.cpp: where --load points (checkpoint/checkpoint.h locate_checkpoint), the
// sample-based learning-rate schedule (--train-samples) and --split's data regions, and
// TensorBoard's record framing (report/tensorboard.h). The runs themselves:
// tests/mpi/checkpoint_faults.sh, tests/scripts/megatron_llama.sh.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"  // crc32c
#include "model/data.h"          // data_regions
#include "model/optimizer.h"     // learning_rate
#include "report/tensorboard.h"

namespace paralab {
namespace {

// A fresh folder under /tmp, removed with what the test made in it.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/paralab_resume_XXXXXX";
    path_ = mkdtemp(name);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  void folder(const std::string& rel) const { make_folders(path_ + "/" + rel); }
  void file(const std::string& rel, const std::string& text) const {
    std::ofstream(path_ + "/" + rel) << text;
  }

 private:
  std::string path_;
};

std::string error_of(const std::string& load, int step = 0) {
  try {
    locate_checkpoint(load, step);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(LocateCheckpoint, LatestStepAndIterationFolder) {
  TempDir d;
  d.folder("ck/iter_0000004");
  d.folder("ck/iter_0000008");
  d.file("ck/latest", "8\n");
  const std::string ck = d.path() + "/ck";
  CheckpointLocation at = locate_checkpoint(ck);
  EXPECT_TRUE(at.found);
  EXPECT_EQ(at.iteration, 8);
  EXPECT_EQ(at.folder, ck + "/iter_0000008");
  EXPECT_EQ(at.chosen_by, ck + "/latest");
  at = locate_checkpoint(ck + "/", 4);  // --ckpt-step (a trailing slash is the same folder)
  EXPECT_EQ(at.iteration, 4);
  EXPECT_EQ(at.chosen_by, "--ckpt-step 4");
  at = locate_checkpoint(ck + "/iter_0000004");  // as Megatron users type it
  EXPECT_EQ(at.iteration, 4);
  EXPECT_EQ(at.dir, ck);
  EXPECT_EQ(at.chosen_by, "--load");
  EXPECT_EQ(read_latest(ck), 8);
  EXPECT_EQ(saved_iterations(ck), (std::vector<int>{4, 8}));
}

TEST(LocateCheckpoint, NothingThereIsNotFoundAndEveryWrongLoadIsRefused) {
  TempDir d;
  d.folder("empty");
  d.folder("nolatest/iter_0000002");
  d.folder("dangling/iter_0000002");
  d.file("dangling/latest", "5\n");
  d.file("file.bin", "");
  const std::string p = d.path();
  EXPECT_FALSE(locate_checkpoint(p + "/missing").found);  // the caller decides (cli/)
  EXPECT_FALSE(locate_checkpoint(p + "/empty").found);
  EXPECT_EQ(error_of(p + "/file.bin"), p + "/file.bin is a file, not a checkpoint folder (one "
                                           "holding latest and iter_NNNNNNN/ folders)");
  EXPECT_EQ(error_of(p + "/nolatest"), p + "/nolatest has no latest, but iterations 2: choose "
                                           "one with --ckpt-step N (or write N into " + p +
                                           "/nolatest/latest)");
  EXPECT_EQ(error_of(p + "/dangling"), p + "/dangling/latest names iteration 5, but " + p +
                                           "/dangling/iter_0000005 is missing (iterations "
                                           "there: 2; choose one with --ckpt-step N)");
  EXPECT_EQ(error_of(p + "/dangling", 3), "--ckpt-step 3: no " + p + "/dangling/iter_0000003 "
                                          "(iterations there: 2)");
  EXPECT_EQ(error_of(p + "/dangling/iter_0000002", 3),
            p + "/dangling/iter_0000002 is iteration 2's folder, but --ckpt-step asks for 3");
}

TEST(LearningRate, SampleBasedScheduleCountsSamples) {
  TrainConfig t;
  t.lr = 1.0f, t.min_lr = 0.1f, t.global_batch_size = 4, t.train_iters = 10;
  t.lr_decay_style = LrDecay::LINEAR;
  t.lr_warmup_samples = 10;  // 2.5 steps of 4 samples
  t.lr_decay_samples = 40;
  EXPECT_FLOAT_EQ(learning_rate(t, 1), 0.4f);  // 4 of 10 samples warmed up
  EXPECT_FLOAT_EQ(learning_rate(t, 2), 0.8f);
  EXPECT_FLOAT_EQ(learning_rate(t, 3), (float)(0.1 + 0.9 * (1 - 2.0 / 30)));  // 12 samples
  EXPECT_FLOAT_EQ(learning_rate(t, 10), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(t, 11), 0.1f);
}

TEST(DataRegions, MegatronSplitSharesTheTokens) {
  DataRegions r = data_regions(1000, 16);  // the default: the last 10% validates
  EXPECT_EQ(r.train, 900u);
  EXPECT_EQ(r.valid, 100u);
  r = data_regions(1000, 16, 0.949, 0.05);  // --split 949,50,1
  EXPECT_EQ(r.train, 949u);
  EXPECT_EQ(r.valid, 50u);  // the test share, 1, is not read
  r = data_regions(1000, 16, 0.99, 0.01);  // 10 tokens: shorter than a window of 17
  EXPECT_EQ(r.valid, 0u);
}

TEST(TensorBoard, MaskedCrcAndTheEventBytes) {
  EXPECT_EQ(tfrecord_masked_crc("", 0), 0xa282ead8u);  // crc32c("") = 0
  const uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(tfrecord_masked_crc("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  // Event{wall_time 0.5, step 3, summary{value{tag "a", simple_value 1.0}}}
  const std::string e = tensorboard_scalar_event(0.5, 3, {{"a", 1.0f}});
  const unsigned char want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xE0, 0x3F,  // wall_time: 0.5
                                0x10, 0x03,                          // step: 3
                                0x2A, 0x0A,                          // summary: 10 bytes
                                0x0A, 0x08,                          //  value: 8 bytes
                                0x0A, 0x01, 'a',                     //   tag "a"
                                0x15, 0, 0, 0x80, 0x3F};             //   simple_value 1.0f
  ASSERT_EQ(e.size(), sizeof want);
  EXPECT_EQ(std::memcmp(e.data(), want, sizeof want), 0);
}

TEST(TensorBoard, RecordsAreFramedWithTheirLengthAndCrcs) {
  TempDir d;
  std::string path;
  {
    TensorBoardWriter w(d.path() + "/tb");
    w.scalars(7, {{"lm loss", 2.5f}});
    path = w.path();
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0, records = 0;
  while (at < bytes.size()) {
    uint64_t n;
    uint32_t length_crc, data_crc;
    ASSERT_LE(at + 12, bytes.size());
    std::memcpy(&n, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, tfrecord_masked_crc(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + n + 4, bytes.size());
    std::memcpy(&data_crc, bytes.data() + at + 12 + n, 4);
    EXPECT_EQ(data_crc, tfrecord_masked_crc(bytes.data() + at + 12, n));
    if (records == 0) {  // the file version event
      EXPECT_NE(bytes.substr(at + 12, n).find("brain.Event:2"), std::string::npos);
    }
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 2u);
}

}  // namespace
}  // namespace paralab
