// checkpoint/checkpoint_manifest.h: a checkpoint's table of contents, DIR/iter_NNNNNNN/manifest.json.
//
// Rank 0 writes it last, after every rank's shard is on disk (checkpoint/checkpoint.h): its
// presence is what makes an iteration folder a checkpoint. It says
//   what was trained: the model (every size the tensors' shapes depend on, and the numbers
//     the maths uses: norm epsilon, rotary base, the router's top-k, score function, gate
//     scaling and capacity factor; the vocabulary padding multiple, which places a VOCAB
//     tensor's rows on the saving tp ranks), the parameters' storage type (F32 or
//     BF16), the layout it was saved from (tp, cp, pp, vpp, dp, ep, etp, ZeRO stage), the
//     seed and the global batch (together they fix the data order: model/data.h);
//   where training stands: the iteration (steps done; the learning-rate schedule and the
//     data position follow from it), Adam's update count, the skipped steps, the loss
//     scaler's state, the FP8 recipe (format, recipe, margin, history length, algorithm)
//     whose delayed-scaling state the shards hold per layer (entries "fp8/L");
//   every logical tensor (param_table's global names: layers by global index, experts by
//     global id) with its full shape;
//   per rank its shard file, bytes, CRC32C, and its pieces: (tensor, the slice of the full
//     tensor the rank's local tensor is (model/param_table.h TensorSlice), the local element
//     range [begin, end) it saved, the shard's entry holding it).
// Loading at any layout reads the pieces back through shard_indices: the resharding map.
//
// The reader is strict (the file may be truncated, edited or hostile: tests/fuzz): it refuses
// any missing field, wrong type, unknown version, out-of-range number or unsafe file name
// with CheckpointError("PATH: <rule>"), and check_manifest refuses a manifest of another model
// or one whose pieces do not cover every element of every tensor exactly once.
//
// defines: CheckpointError, ManifestPiece, ManifestShard, Manifest, ManifestIntField,
//          kManifestIntFields, manifest_json, write_manifest_shard, parse_manifest_shard,
//          parse_manifest (checkpoint_manifest.cpp), check_manifest, saved_spec
//          (checkpoint_manifest_check.cpp)
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "model/config.h"
#include "model/data.h"  // InputError
#include "model/loss_scaler.h"  // LossScalerState
#include "checkpoint/json.h"
#include "checkpoint/json_document.h"
#include "model/param_table.h"
#include "parallel/fp8_scaling.h"  // Fp8Config

namespace paralab {

struct CheckpointError : InputError {
  using InputError::InputError;
};

constexpr int kCheckpointVersion = 1;

struct ManifestPiece {
  std::string tensor;   // param_table name
  TensorSlice slice;    // which part of the full tensor the saving rank's local tensor is
  int64_t begin = 0, end = 0;  // the local elements saved
  std::string entry;    // the shard's entries "param/ENTRY", "exp_avg/ENTRY", ...
};

struct ManifestShard {
  int rank = 0;
  std::string file;     // inside the iteration folder: rank_NNNNN.safetensors
  uint64_t bytes = 0;          // the file
  uint32_t crc32c = 0;
  uint64_t payload_bytes = 0;  // its tensor data (the plan's checkpoint_bytes)
  std::vector<ManifestPiece> pieces;
  std::vector<int> expert_bias_layers;  // entries "expert_bias/L" (aux-loss-free balancing)
  std::vector<int> fp8_layers;  // entries "fp8/L": FP8 delayed scaling's state of layer L
  // entries "fp8/L/e": the state of global expert e of MoE layer L, one per expert the shard's
  // rank holds
  std::vector<int> fp8_expert_layers;
};

// The data a run read: what a checkpoint records of it, so that a resumed run that reads
// other data is told (cli/flags_checkpoint.cpp warns): its flags in words, and the CRC-32C of
// each indexed dataset's .idx file.
struct ManifestData {
  std::string description;  // "" when not recorded (a checkpoint from before the record)
  std::vector<std::string> files;
  std::vector<uint32_t> crc32c;
};

struct Manifest {
  int version = kCheckpointVersion;
  int iteration = 0;
  ModelConfig model;              // the fields manifest_json writes (the rest default)
  ParallelConfig parallel;        // the saving layout (information; any layout loads it)
  bool bf16 = false;              // parameters stored as BF16, with fp32 master weights
  bool fp16 = false;              // parameters stored as F16, with fp32 master weights
  Precision precision() const {
    return bf16 ? Precision::BF16 : fp16 ? Precision::FP16 : Precision::FP32;
  }
  bool optimizer = true;          // exp_avg and exp_avg_sq (and master) saved
  uint64_t seed = 0;
  int global_batch_size = 0;
  int adam_steps = 0, skipped_steps = 0, skipped_in_a_row = 0;
  // A dynamic loss scale's state after the saved step (megatron-core's DynamicGradScaler
  // state_dict: scale, growth_tracker, hysteresis_tracker); absent in other runs' manifests.
  bool has_loss_scaler = false;
  LossScalerState loss_scaler;
  // The FP8 recipe trained with (--fp8-*; "fp8" in the file, absent without --fp8-format):
  // what delayed scaling's saved histories mean (checkpoint/checkpoint.h).
  Fp8Config fp8;
  std::vector<std::string> tensors;                 // param_table order
  std::vector<std::vector<int64_t>> shapes;         // full shapes
  std::vector<ManifestShard> shards;                // one per saving rank, by rank
  ManifestData data;                                // what the run read
};

// The integer model fields a manifest carries (their table is checkpoint_manifest.cpp's): each
// with the flag that sets it, read from and written into a ModelConfig. `shape` fields decide a
// tensor's shape: a run must match them to load (check_manifest).
struct ManifestIntField {
  const char* key;
  const char* flag;
  bool shape;
  int64_t (*get)(const ModelConfig&);
  void (*set)(ModelConfig&, int64_t);
};
extern const std::vector<ManifestIntField> kManifestIntFields;  // in the file's order

std::string manifest_json(const Manifest& m);
// One shard's entry, as in the manifest: what a rank sends rank 0 after writing its shard.
void write_manifest_shard(JsonWriter& j, const ManifestShard& shard);
ManifestShard parse_manifest_shard(const Json& entry, int num_layers,
                                   const std::string& path);
// Parses and checks structure, types and ranges (not the model: check_manifest).
Manifest parse_manifest(const std::string& text, const std::string& path);
// The run's model must be the manifest's: every size a tensor's shape depends on equal
// (else "PATH: hidden_size is 128, the run has 64 (--hidden-size)"), the tensor list
// param_table's, every piece's slice valid for its tensor, and the pieces covering each
// tensor's elements exactly once.
void check_manifest(const Manifest& m, const ModelConfig& run, const std::string& path);
// A tensor of the run's table as the saving ranks held it: a VOCAB tensor's local rows padded
// to the manifest's --make-vocab-size-divisible-by x tp (the run's may differ; the full shape
// is V either way). The pieces' slices are read through it.
ParamSpec saved_spec(const Manifest& m, const ParamSpec& run);

}  // namespace paralab
