// checkpoint/checkpoint.h: save the training state, and resume it bit for bit at any layout.
//
// The lesson. What a training run must keep to continue as if it never stopped:
//   parameters (in their storage type), Adam's m and v, with bf16 the fp32 master weights;
//   Adam's update count (its bias correction), the iteration (the learning-rate schedule's
//   position and the data position: model/data.h derives every microbatch from (seed, step),
//   and dropout masks from a counter keyed on (seed, step, microbatch)); the routers' expert
//   bias (aux-loss-free balancing); the skipped-step counters; the loss scaler; FP8 delayed
//   scaling's amax histories and scales.
// Nothing else: gradients are zeroed every step, activations live within one.
//
// Layout on disk (Megatron's names: --save DIR, --load DIR, DIR/latest):
//   DIR/iter_NNNNNNN/rank_RRRRR.safetensors   one shard per rank: the elements that rank
//       owns (OwnedSegment), once over its data-parallel replicas (ZeRO >= 1: every dp rank
//       its slice; DDP: dp rank 0). As in Megatron, what tp ranks or stages hold alike (norms,
//       biases, gpt's tied copy of the word embedding on the last stage) each saves: equal
//       values, so that a rank's shard is its owned state, no more, no less. DualPipe's second
//       copy of two stages (pp rank p - 1 - r of r) saves nothing: the same pieces again.
//   FP8 delayed scaling's amax histories and scales (the model's state, as Transformer
//       Engine's extra_state is: saved with --no-save-optim too) are the same on every tp, dp
//       and cp rank of a stage after each step's amax reduction: the rank that saves the expert
//       bias (dense replica 0, tp rank 0) saves them, one entry per global layer, "fp8/L"
//       (its 4 linears, Fp8Scaling::linears_state), so another pipeline layout finds each
//       layer's; the manifest names the recipe ("fp8") they belong to. The MoE experts' (one
//       state per expert, reduced over the ranks holding it) are saved per expert, "fp8/L/e"
//       (global expert e's fc1 and fc2), by its edp rank 0 on etp rank 0, so another ep
//       layout finds each expert's; the shard lists those layers ("fp8_expert_layers").
//   DIR/iter_NNNNNNN/manifest.json            rank 0, after every shard is on disk
//       (checkpoint/checkpoint_manifest.h: the model, the pieces, a CRC32C per shard)
//   DIR/latest                                the last complete iteration, rank 0, last
// Every file is written atomically (checkpoint/file_io.h): a crash or a kill during a save leaves
// the previous checkpoint, which `latest` still names, loadable.
// Collectives: one all-gather of each rank's piece list, a barrier before the manifest.
//
// Loading reads the manifest (every rank; a bad one ends every rank alike, exit 2), checks
// each shard's CRC32C (rank r the shards r, r + W, ...; a bad one ends the job, exit 2), and
// gives each rank its slices (checkpoint/reshard.h) from the pieces, at whatever layout it runs.
//
// Where --load points (locate_checkpoint): DIR/latest's iteration, the iteration --ckpt-step N
// names (Megatron's), or an iteration folder given as --load itself (DIR/iter_0000200, as
// Megatron users type it). A file, a `latest` that names a missing folder, or iteration folders
// without a `latest` are refused with one line, never read as "no checkpoint": a wrong --load
// must not restart a long run from step 1.
//
// defines: CheckpointPlace, TrainingPosition, SaveStats, save_checkpoint, CheckpointLocation,
//          locate_checkpoint, read_latest, saved_iterations, iteration_folder, CheckpointReader
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "checkpoint/checkpoint_manifest.h"
#include "model/optimizer.h"
#include "checkpoint/reshard.h"
#include "checkpoint/safetensors.h"
#include "model/transformer.h"
#include "parallel/comm.h"

namespace paralab {

// Who writes what among replicas: the rank's place in the dense parameters' data-parallel
// group (dp, or dp x cp) and in the experts' (edp).
struct CheckpointPlace {
  int zero_stage = 0;
  int dense_replica = 0;   // rank in the dense group
  int expert_replica = 0;  // rank in the expert-data-parallel group
  bool mirror_copy = false;  // DualPipe's second copy of two stages: the first saves them
  // Does this rank save the owned elements of a view? (the rule in the header)
  bool writes(const TensorView& view) const;
};

// The safetensors dtype of a run's parameters: F32, BF16 or F16.
inline SafeDType float_type(Precision p) {
  return p == Precision::BF16 ? SafeDType::BF16 : p == Precision::FP16 ? SafeDType::F16
                                                                      : SafeDType::F32;
}

struct TrainingPosition {
  int iteration = 0;  // steps done
  int adam_steps = 0, skipped_steps = 0, skipped_in_a_row = 0;
  // A dynamic loss scale's state after the step (a static one is its flag, as megatron-core's
  // ConstantGradScaler saves nothing).
  bool dynamic_loss_scale = false;
  LossScalerState loss_scaler;
};

struct SaveStats {
  std::string folder;
  double seconds = 0;             // the whole save, barrier to barrier
  uint64_t payload_bytes = 0;     // this rank's tensor data
  uint64_t file_bytes = 0;        // this rank's shard file
  uint64_t total_file_bytes = 0;  // every shard and the manifest
  std::vector<uint64_t> rank_payload_bytes;  // every rank's tensor data (plan: checkpoint_bytes)
};

// Collective over the world. Writes DIR/iter_<iteration>/ and then DIR/latest. Without
// save_optimizer (--no-save-optim, Megatron's) the shards hold the parameters alone, and the
// manifest says so ("optimizer": false).
SaveStats save_checkpoint(const std::string& dir, const TrainingPosition& position,
                          Transformer& model, AdamW& optimizer, const CheckpointPlace& place,
                          Communicator& world, const TrainConfig& train,
                          const ParallelConfig& parallel, bool save_optimizer = true,
                          const ManifestData& data = ManifestData());

// DIR/iter_NNNNNNN (seven digits, Megatron's).
std::string iteration_folder(const std::string& dir, int iteration);
// DIR/latest's iteration; 0 when DIR/latest does not exist. Throws CheckpointError when it is
// not a number >= 1.
int read_latest(const std::string& dir);
// The iterations of DIR's iter_NNNNNNN folders, ascending (none when DIR does not exist).
std::vector<int> saved_iterations(const std::string& dir);

struct CheckpointLocation {
  bool found = false;  // false: DIR is missing or holds no checkpoint (no latest, no iter_*)
  std::string dir;     // the checkpoint folder: --load, or the folder above the one it names
  std::string folder;  // the iteration folder to read, DIR/iter_NNNNNNN
  int iteration = 0;
  std::string chosen_by;  // "DIR/latest", "--ckpt-step N", "--load" (an iteration folder)
};
// Where `load` (--load) points; ckpt_step > 0 (--ckpt-step) chooses the iteration. Throws
// CheckpointError, one line naming the path: a file; an iteration folder that is not
// --ckpt-step's; --ckpt-step's folder missing; `latest` naming a missing folder; iteration
// folders without `latest` (the message lists them and says --ckpt-step N).
CheckpointLocation locate_checkpoint(const std::string& load, int ckpt_step = 0);

class CheckpointReader {
 public:
  // The iteration folder `at` found (locate_checkpoint) and its manifest, checked against
  // `run` (nullptr: the manifest's own model, for --convert). Collective over `world` (the
  // checksum check is shared out, then a barrier). run: the run's storage (a 16-bit run's
  // master weights come from a 16-bit checkpoint's master, or an fp32 one's parameters; a run
  // whose storage is not the checkpoint's 16-bit type takes that checkpoint's master, the exact
  // values, rather than its rounded parameters).
  CheckpointReader(const CheckpointLocation& at, Communicator* world, const ModelConfig* run,
                   Precision run_precision);
  ~CheckpointReader();
  const std::string& folder() const { return folder_; }
  const Manifest& manifest() const { return manifest_; }
  // The full tensor of one kind, assembled from every rank's pieces (checkpoint/reshard.h):
  // "param" (a 16-bit checkpoint's master weights for a run of another precision), "stored"
  // (the parameters as saved), "master", "exp_avg", "exp_avg_sq".
  std::vector<float> full(const ParamSpec& spec, const std::string& kind);
  FullTensor source() {
    return [this](const ParamSpec& spec, const std::string& kind) { return full(spec, kind); };
  }
  // Each MoE layer's expert bias, from the shard that saved it (empty when none was).
  std::vector<float> expert_bias(int layer);
  // A layer's FP8 delayed-scaling state (Fp8Scaling::linears_state of its 4 linears), from the
  // shard that saved it (empty when none did); has_fp8_state: did any shard save some?
  std::vector<float> fp8_state(int layer);
  // Global expert `expert` of MoE layer `layer`: its fc1 and fc2 (Fp8Scaling::linears_state
  // of 2 linears), from the shard that saved it (empty when none did).
  std::vector<float> fp8_expert_state(int layer, int expert);
  bool has_fp8_state() const;
  TrainingPosition position() const;
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  SafetensorsReader& shard(int s);
  // shard_indices of a piece's slice, kept for the tensor being read
  const std::vector<int64_t>& indices(const ParamSpec& spec, const TensorSlice& slice);
  std::string index_tensor_;
  std::map<std::string, std::vector<int64_t>> index_cache_;
  Precision run_precision_ = Precision::FP32;
  std::string folder_;
  Manifest manifest_;
  std::map<int, std::unique_ptr<SafetensorsReader>> shards_;
  uint64_t bytes_read_ = 0;
};

}  // namespace paralab
