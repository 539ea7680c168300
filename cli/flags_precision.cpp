// cli/flags_precision.cpp: the numeric precision of the run: fp32 (the default) or --bf16
// (bf16 parameters, gradients and activations, fp32 master weights and Adam moments).
#include <CLI/CLI.hpp>

#include "cli/flags_impl.h"  // defines: add_switch; cli/flags.h Options

namespace paralab {

void add_precision_flags(CLI::App& app, Options& o) {
  TrainConfig& t = o.train;
  const char* kPrecision = "Precision";
  add_switch(app, "--bf16", t.bf16,
             "bf16 parameters, gradients and activations with fp32 master weights and "
             "Adam moments (on CPU bf16 is storage only); default fp32")
      ->group(kPrecision);
}

}  // namespace paralab
