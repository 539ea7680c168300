// checkpoint/checkpoint_load.cpp: CheckpointReader (the design is in checkpoint.h; where --load
// points: checkpoint/checkpoint_location.cpp). It reads the manifest, checks every shard's size
// and CRC32C before anything is read from one, and gives the full tensors, the expert bias, the
// FP8 state and the training position back from the pieces, whatever layout saved them.
#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include "checkpoint/file_io.h"

namespace paralab {

CheckpointReader::CheckpointReader(const CheckpointLocation& at, Communicator* world,
                                   const ModelConfig* run, Precision run_precision)
    : run_precision_(run_precision), folder_(at.folder) {
  const int iteration = at.iteration;
  const std::string path = folder_ + "/manifest.json";
  manifest_ = parse_manifest(read_small_file(path, 1u << 30), path);
  if (manifest_.iteration != iteration)
    throw CheckpointError(path + ": iteration " + std::to_string(manifest_.iteration) +
                          ", but " + at.chosen_by + " says " + std::to_string(iteration));
  check_manifest(manifest_, run ? *run : manifest_.model, path);
  // Each rank checks the shards s = rank, rank + W, ...: a bad one ends the job (its own
  // message), the barrier keeps the others from reading on before every check passed.
  const int W = world ? world->size() : 1, me = world ? world->rank() : 0;
  for (int s = me; s < (int)manifest_.shards.size(); s += W) {
    const ManifestShard& shard = manifest_.shards[s];
    const std::string file = folder_ + "/" + shard.file;
    uint64_t bytes = 0;
    uint32_t crc = 0;
    try {
      crc = crc32c_file(file, &bytes);
    } catch (const std::runtime_error& e) {
      fail(e.what(), 2);
    }
    if (bytes != shard.bytes)
      fail(file + ": " + std::to_string(bytes) + " bytes, the manifest says " +
               std::to_string(shard.bytes) + " (a truncated or replaced shard)", 2);
    if (crc != shard.crc32c) {
      char line[160];
      std::snprintf(line, sizeof line, ": CRC32C %08x, the manifest says %08x (a corrupted shard)",
                    crc, shard.crc32c);
      fail(file + line, 2);
    }
    bytes_read_ += bytes;
  }
  if (world) world->barrier();
}

CheckpointReader::~CheckpointReader() = default;

SafetensorsReader& CheckpointReader::shard(int s) {
  auto it = shards_.find(s);
  if (it == shards_.end()) {
    const std::string file = folder_ + "/" + manifest_.shards.at(s).file;
    try {
      it = shards_.emplace(s, std::unique_ptr<SafetensorsReader>(new SafetensorsReader(file))).first;
    } catch (const InputError& e) {
      fail(e.what(), 2);
    }
  }
  return *it->second;
}

const std::vector<int64_t>& CheckpointReader::indices(const ParamSpec& spec,
                                                      const TensorSlice& slice) {
  // the kinds of one tensor follow each other (load_parameters, load_optimizer_state): keep
  // that tensor's maps only
  if (index_tensor_ != spec.name) index_cache_.clear(), index_tensor_ = spec.name;
  const std::string key = std::to_string(slice.expert) + "/" + std::to_string(slice.tp) + "/" +
                          std::to_string(slice.tp_rank) + "/" + std::to_string(slice.ep) + "/" +
                          std::to_string(slice.ep_rank) + "/" + std::to_string(slice.etp) + "/" +
                          std::to_string(slice.etp_rank);
  auto it = index_cache_.find(key);
  if (it == index_cache_.end()) it = index_cache_.emplace(key, shard_indices(spec, slice)).first;
  return it->second;
}

std::vector<float> CheckpointReader::full(const ParamSpec& spec, const std::string& kind) {
  // a run of another storage reads the master weights of a 16-bit checkpoint, the exact
  // values; 16-bit runs without them (an fp32 checkpoint) start their master from the fp32
  // parameters
  // ("stored": the parameters as saved, whatever the run: --convert's export)
  std::string from = kind == "stored" ? "param" : kind;
  const Precision saved = manifest_.precision();
  // (a checkpoint saved with --no-save-optim has no master: its 16-bit parameters then)
  if (kind == "param" && saved != Precision::FP32 && saved != run_precision_ &&
      manifest_.optimizer)
    from = "master";
  if (kind == "master" && saved == Precision::FP32) from = "param";
  std::vector<float> out(spec.numel(), 0.0f);
  for (int s = 0; s < (int)manifest_.shards.size(); ++s)
    for (const ManifestPiece& p : manifest_.shards[s].pieces) {
      if (p.tensor != spec.name) continue;
      SafetensorsReader& reader = shard(s);
      const std::string name = from + "/" + p.entry;
      const SafeTensor* t = reader.header().find(name);
      if (!t || t->numel() != p.end - p.begin)
        fail(reader.path() + ": no entry " + name + " of " + std::to_string(p.end - p.begin) +
                 " elements (the manifest's piece of " + spec.name + ")", 2);
      const std::vector<float> values = reader.read_floats(*t);
      bytes_read_ += t->end - t->begin;
      // a weight or a moment that is not finite would only train NaN
      for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
          fail(reader.path() + ": " + name + " (" + spec.name + ") holds " +
                   (std::isnan(values[i]) ? "NaN" : "Inf") + " at its element " + std::to_string(i), 2);
      // a slice that is the whole tensor (tp 1, replicated, one expert rank) maps i to i up
      // to numel: past it are a VOCAB tensor's padding rows (the rank's local tensor holds Vp
      // rows, the full one V), saved with the rest and no element of the full tensor
      const bool whole = p.slice.expert ? p.slice.ep == 1 && p.slice.etp == 1
                                        : p.slice.tp == 1 || spec.split == TpSplit::REPLICATED;
      if (whole) {
        const int64_t end = std::min<int64_t>(p.end, (int64_t)out.size());
        if (end > p.begin)
          std::copy(values.begin(), values.begin() + (end - p.begin), out.begin() + p.begin);
        continue;
      }
      const std::vector<int64_t>& index = indices(saved_spec(manifest_, spec), p.slice);
      for (int64_t i = p.begin; i < p.end; ++i)
        if (index[i] >= 0) out[index[i]] = values[i - p.begin];
    }
  return out;
}

std::vector<float> CheckpointReader::expert_bias(int layer) {
  for (int s = 0; s < (int)manifest_.shards.size(); ++s)
    for (int l : manifest_.shards[s].expert_bias_layers)
      if (l == layer) {
        SafetensorsReader& reader = shard(s);
        const std::string name = "expert_bias/" + std::to_string(layer);
        const SafeTensor* t = reader.header().find(name);
        if (!t) fail(reader.path() + ": no entry " + name + " (the manifest lists it)", 2);
        return reader.read_floats(*t);
      }
  return {};
}

std::vector<float> CheckpointReader::fp8_state(int layer) {
  for (int s = 0; s < (int)manifest_.shards.size(); ++s)
    for (int l : manifest_.shards[s].fp8_layers)
      if (l == layer) {
        SafetensorsReader& reader = shard(s);
        const std::string name = "fp8/" + std::to_string(layer);
        const SafeTensor* t = reader.header().find(name);
        const size_t want = Fp8Scaling::state_bytes(manifest_.fp8, 4) / sizeof(float);
        if (!t || (size_t)t->numel() != want)
          fail(reader.path() + ": no entry " + name + " of " + std::to_string(want) +
                   " floats (the manifest lists it, with its \"fp8\" recipe)", 2);
        bytes_read_ += t->end - t->begin;
        return reader.read_floats(*t);
      }
  return {};
}

std::vector<float> CheckpointReader::fp8_expert_state(int layer, int expert) {
  const std::string name = "fp8/" + std::to_string(layer) + "/" + std::to_string(expert);
  const size_t want = Fp8Scaling::state_bytes(manifest_.fp8, 2) / sizeof(float);
  for (int s = 0; s < (int)manifest_.shards.size(); ++s)
    for (int l : manifest_.shards[s].fp8_expert_layers)
      if (l == layer) {
        SafetensorsReader& reader = shard(s);
        const SafeTensor* t = reader.header().find(name);
        if (!t) continue;  // another shard holds this expert
        if ((size_t)t->numel() != want)
          fail(reader.path() + ": entry " + name + " is not " + std::to_string(want) +
                   " floats (the manifest's \"fp8\" recipe)", 2);
        bytes_read_ += t->end - t->begin;
        return reader.read_floats(*t);
      }
  return {};
}

bool CheckpointReader::has_fp8_state() const {
  for (const ManifestShard& s : manifest_.shards)
    if (!s.fp8_layers.empty() || !s.fp8_expert_layers.empty()) return true;
  return false;
}

TrainingPosition CheckpointReader::position() const {
  TrainingPosition p;
  p.iteration = manifest_.iteration;
  p.adam_steps = manifest_.adam_steps;
  p.skipped_steps = manifest_.skipped_steps;
  p.skipped_in_a_row = manifest_.skipped_in_a_row;
  p.dynamic_loss_scale = manifest_.has_loss_scaler;
  p.loss_scaler = manifest_.loss_scaler;
  return p;
}

}  // namespace paralab
