// report/summary.cpp: see summary.h.
#include "report/summary.h"
#include "checkpoint/json.h"    // JsonWriter
#include "report/report.h"  // format_mib, format_si, format_duration
#include "report/text.h"    // strprintf

namespace paralab {

std::string validation_line(int step, bool final, double loss, int batches, int samples,
                            double seconds) {
  const std::string where = final ? strprintf("the end of training (iteration %d)", step)
                                  : strprintf("iteration %d", step);
  const std::string line =
      strprintf(" validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | %d x %d "
                "held-out samples, %s |",
                where.c_str(), loss, perplexity(loss), batches, samples,
                format_duration(seconds).c_str());
  const std::string rule(line.size() + 1, '-');
  return rule + "\n" + line + "\n" + rule;
}

static std::string percent_or_na(double f) {
  return std::isfinite(f) ? strprintf("%.2f%%", 100 * f) : "n/a (no peak)";
}

std::string summary_text(const RunSummary& s) {
  std::string t = "summary\n";
  const std::string which =
      s.first_step > 1 ? strprintf(" (iterations %d-%d, resumed)", s.first_step, s.last_step) : "";
  t += strprintf("  %-16s %d steps%s, %.0f tokens%s\n", "trained", s.steps, which.c_str(), s.tokens,
                 s.skipped_steps > 0
                     ? strprintf("; %d skipped (loss or gradient norm not finite, no update)",
                                 s.skipped_steps).c_str()
                     : "");
  t += strprintf("  %-16s %s (steps %s, evaluation %s)\n", "wall time",
                 format_duration(s.wall_seconds).c_str(), format_duration(s.step_seconds).c_str(),
                 format_duration(s.eval_seconds).c_str());
  t += strprintf("  %-16s %s tok/s (tokens / time in steps)\n", "throughput",
                 format_si(s.tokens_per_second(), 1).c_str());
  t += strprintf("  %-16s MFU %s, HFU %s (over the steps, weighted by their time)\n", "utilization",
                 percent_or_na(s.mfu()).c_str(), percent_or_na(s.hfu()).c_str());
  if (s.peak_memory_bytes >= 0) {
    t += strprintf("  %-16s %s MiB (rank %d: the ledger's largest total of any step)", "peak memory",
                   format_mib((double)s.peak_memory_bytes).c_str(), s.peak_memory_rank);
    if (s.eval_peak_memory_bytes >= 0)
      t += strprintf("; evaluation %s MiB (rank %d)",
                     format_mib((double)s.eval_peak_memory_bytes).c_str(), s.eval_peak_memory_rank);
    t += "\n";
  }
  if (std::isfinite(s.final_train_loss))
    t += strprintf("  %-16s %.4f (%s)\n", "final train loss", s.final_train_loss,
                   s.final_train_first < s.last_step
                       ? strprintf("mean of steps %d-%d", s.final_train_first, s.last_step).c_str()
                       : strprintf("step %d", s.last_step).c_str());
  if (s.evaluations > 0)
    t += strprintf("  %-16s %.4f, PPL %.3f (after step %d, %d batches; %d evaluation(s))\n",
                   "final val loss", s.final_valid_loss, perplexity(s.final_valid_loss),
                   s.valid_step, s.eval_batches, s.evaluations);
  return t;
}

std::string summary_json(const RunSummary& s) {
  JsonWriter j;
  j.begin_object();
  j.field("type", "summary").field("steps", s.steps).field("tokens", s.tokens);
  j.field("first_step", s.first_step).field("last_step", s.last_step);
  j.field("skipped_steps", s.skipped_steps);
  j.field("wall_s", s.wall_seconds).field("step_s", s.step_seconds).field("eval_s", s.eval_seconds);
  j.field("tokens_per_s", s.tokens_per_second()).field("mfu", s.mfu()).field("hfu", s.hfu());
  if (s.peak_memory_bytes >= 0)
    j.field("peak_memory_bytes", s.peak_memory_bytes).field("peak_memory_rank", s.peak_memory_rank);
  if (s.eval_peak_memory_bytes >= 0)
    j.field("eval_peak_memory_bytes", s.eval_peak_memory_bytes)
        .field("eval_peak_memory_rank", s.eval_peak_memory_rank);
  j.field("final_train_loss", s.final_train_loss);
  j.field("final_train_loss_first_step", s.final_train_first);
  if (s.evaluations > 0) {
    j.field("final_validation_loss", s.final_valid_loss);
    j.field("final_validation_ppl", perplexity(s.final_valid_loss));
    j.field("validation_step", s.valid_step).field("evaluations", s.evaluations);
  }
  j.end_object();
  return j.str();
}

}  // namespace paralab
