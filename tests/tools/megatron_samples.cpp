// tests/tools/megatron_samples.cpp: the token ids paralab's data loader hands a single rank,
// for tests/scripts/megatron_data.py to compare with megatron-core's GPTDataset and
// BlendedDataset built from the same flags.
//
//   megatron_samples <trainer flags>
// prints "train", then one line per training sample in the order the steps read them (step
// 1's G samples first), its --seq-length + 1 tokens (the inputs, then the last label); then
// "valid" and the --eval-iters x G validation samples the same way (with --eval-interval).
// The flags are the trainer's own (parse_flags), on one CPU rank. Exit 0, or 2 with one line
// on a bad flag or a bad data file.
#include <cstdio>
#include <string>
#include <vector>
#include "cli/flags.h"  // parse_flags_or_exit
#include "model/data.h"  // DataLoader

int main(int argc, char** argv) {
  using namespace paralab;
  const Options o = parse_flags_or_exit(argc, argv, 1);
  try {
    const DataLoader d(o.data, o.model, o.train, 1);
    const int B = o.train.micro_batch_size, S = o.model.seq_length;
    std::vector<int> x(B * S), y(B * S);
    auto print = [&]() {
      for (int b = 0; b < B; ++b) {
        for (int s = 0; s < S; ++s) std::printf("%d ", x[b * S + s]);
        std::printf("%d\n", y[b * S + S - 1]);
      }
    };
    std::printf("train\n");
    for (int step = 1; step <= o.train.train_iters; ++step)
      for (int m = 0; m < d.grad_accum_steps(); ++m) {
        d.microbatch(step, m, 0, x.data(), y.data());
        print();
      }
    std::printf("valid\n");
    for (int j = 0; j < (o.eval_interval > 0 ? o.eval_iters : 0); ++j)
      for (int m = 0; m < d.grad_accum_steps(); ++m) {
        d.valid_microbatch(j, m, 0, x.data(), y.data());
        print();
      }
  } catch (const InputError& e) {
    exit_on_input_error(e);
  }
  return 0;
}
