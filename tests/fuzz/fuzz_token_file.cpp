// tests/fuzz/fuzz_token_file.cpp: libFuzzer target for the --data-path checks
// (model/data.h check_data_file: llm.c token files and plain text), with --vocab-size 256 and
// --seq-length 8. The bytes either pass or throw DataError.
//
// They become a file without touching a disk: a memfd, made once per process and rewritten
// for every input, opened by the reader through /proc/self/fd/N like any path. Its name has
// no .bin suffix, so the llm.c branch is reached by the magic or a NUL byte, as data.h says.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include "model/data.h"

namespace {

int memory_file() {
  static const int fd = memfd_create("paralab_fuzz_tokens", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memory_file();
  if (ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t put = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (put <= 0) std::abort();
    done += static_cast<size_t>(put);
  }
  try {
    paralab::check_data_file("/proc/self/fd/" + std::to_string(fd), 256, 8);
  } catch (const paralab::DataError&) {
  }
  return 0;
}
