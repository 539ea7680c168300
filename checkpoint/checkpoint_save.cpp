// checkpoint/checkpoint_save.cpp: save_checkpoint (the design is in checkpoint.h). Each rank
// declares its shard's entries (its owned pieces, their optimizer states, the expert bias and
// FP8 state it saves), streams their data from the device into its safetensors file, and sends
// its entry of the manifest to every rank; rank 0 then writes the manifest and `latest`.
#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include "kernels/ops.h"
#include "measure/clock.h"  // now_seconds
#include "checkpoint/file_io.h"
#include "checkpoint/json.h"
#include "checkpoint/json_document.h"

namespace paralab {

namespace {

std::string shard_name(int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank_%05d.safetensors", rank);
  return name;
}

// Every rank's string, in rank order: an all-gather of the lengths (int32), then one of the
// bytes, each padded to the longest.
std::vector<std::string> all_gather_strings(Communicator& world, const std::string& mine,
                                            kernels::Device dev) {
  const int W = world.size();
  Buffer<int> lengths(dev, W, Category::COMM_BUFFERS);
  const int length = (int)mine.size();
  kernels::memcpy_from_host(dev, lengths.data() + world.rank(), &length, sizeof length);
  world.all_gather(lengths.data() + world.rank(), lengths.data(), 1, DType::I32);
  std::vector<int> sizes(W);
  kernels::memcpy_to_host(dev, sizes.data(), lengths.data(), W * sizeof(int));
  const size_t longest = (size_t)*std::max_element(sizes.begin(), sizes.end());
  Buffer<uint8_t> bytes(dev, longest * W + 1, Category::COMM_BUFFERS);
  std::string padded = mine;
  padded.resize(longest, ' ');
  kernels::memcpy_from_host(dev, bytes.data() + longest * world.rank(), padded.data(), longest);
  world.all_gather(bytes.data() + longest * world.rank(), bytes.data(), longest, DType::U8);
  std::string all(longest * W, ' ');
  kernels::memcpy_to_host(dev, &all[0], bytes.data(), longest * W);
  std::vector<std::string> out;
  for (int r = 0; r < W; ++r) out.push_back(all.substr(longest * r, (size_t)sizes[r]));
  return out;
}

// One piece this rank saves: the owned elements [lo, hi) of a view's local tensor.
struct OwnedPiece {
  const TensorView* view;
  const OwnedSegment* segment;
  bool expert;
  int64_t lo, hi;  // flat indices in the owner's vector
};

std::vector<OwnedPiece> owned_pieces(Transformer& model, const CheckpointPlace& place) {
  std::vector<OwnedPiece> out;
  for (bool expert : {false, true}) {
    DataParallel* owner = expert ? model.expert_data_parallel() : &model.data_parallel();
    if (!owner) continue;
    for (const OwnedSegment& seg : owner->owned_segments())
      for (const TensorView& v : model.views()) {
        if (v.expert != expert || !place.writes(v)) continue;
        const int64_t lo = std::max<int64_t>(seg.flat_begin, v.offset);
        const int64_t hi = std::min<int64_t>(seg.flat_begin + seg.count, v.offset + v.numel);
        if (lo < hi) out.push_back({&v, &seg, expert, lo, hi});
      }
  }
  return out;
}

// The layers whose expert bias this rank saves: dense replica 0, tp rank 0, every MoE layer
// of its stage.
std::vector<int> saved_bias_layers(const Transformer& model, const CheckpointPlace& place) {
  std::vector<int> layers;
  if (place.dense_replica != 0 || place.mirror_copy || model.tensor_parallel().rank() != 0)
    return layers;
  for (int l = 0; l < (int)model.moe_layers().size(); ++l)
    if (!model.moe_layers()[l].expert_bias.empty()) layers.push_back(l);
  return layers;
}

// The layers whose FP8 delayed-scaling state this rank saves, with that state: the same ranks
// as the expert bias (the state is the same on every tp, dp and cp rank of a stage after the
// step's amax reduction: model/transformer_fp8.cpp), every layer of its stage.
std::vector<std::pair<int, std::vector<float>>> saved_fp8_layers(const Transformer& model,
                                                                 const CheckpointPlace& place) {
  std::vector<std::pair<int, std::vector<float>>> layers;
  if (place.dense_replica != 0 || place.mirror_copy || model.tensor_parallel().rank() != 0)
    return layers;
  for (int l = 0; l < model.config().num_layers; ++l) {
    std::vector<float> state = model.fp8_layer_state(l);
    if (!state.empty()) layers.emplace_back(l, std::move(state));
  }
  return layers;
}

// The experts' FP8 state this rank saves, "fp8/L/e" with its floats: each expert's on its edp
// rank 0 and etp rank 0 (after the step's reduction every rank holding the expert has the same).
struct ExpertFp8State {
  int layer, expert;
  std::vector<float> state;
};
std::vector<ExpertFp8State> saved_fp8_experts(const Transformer& model,
                                              const CheckpointPlace& place) {
  std::vector<ExpertFp8State> out;
  if (place.expert_replica != 0 || place.mirror_copy || model.expert_parallel().etp_rank() != 0)
    return out;
  for (int l = 0; l < model.config().num_layers; ++l)
    for (int e = 0; e < model.config().moe.num_experts; ++e) {
      std::vector<float> state = model.fp8_expert_state(l, e);
      if (!state.empty()) out.push_back({l, e, std::move(state)});
    }
  return out;
}

// What this rank's shard holds, declared before a byte is written (the entries' sizes make the
// header): its entry of the manifest and what each entry's data comes from.
struct ShardContents {
  ManifestShard mine;  // this rank's entry of the manifest, sent to rank 0
  std::vector<std::pair<const char*, AdamW::State>> states;  // none with --no-save-optim
  std::vector<OwnedPiece> pieces;
  std::vector<std::pair<int, std::vector<float>>> fp8_layers;
  std::vector<ExpertFp8State> fp8_experts;
  std::vector<SafetensorsStream::Tensor> entries;  // the header, in the data's order
};

// The shard's entries: per owned piece N "param/N" and each optimizer state's "STATE/N", then
// "expert_bias/L", "fp8/L" and "fp8/L/e".
ShardContents declare_shard(Transformer& model, AdamW& optimizer, const CheckpointPlace& place,
                            int rank, SafeDType param_type, bool save_optimizer) {
  ShardContents s;
  if (save_optimizer) {
    s.states = {{"exp_avg", AdamW::State::EXP_AVG}, {"exp_avg_sq", AdamW::State::EXP_AVG_SQ}};
    if (optimizer.has_master()) s.states.push_back({"master", AdamW::State::MASTER});
  }
  s.pieces = owned_pieces(model, place);
  ManifestShard& mine = s.mine;
  mine.rank = rank;
  mine.file = shard_name(rank);
  mine.expert_bias_layers = saved_bias_layers(model, place);
  s.fp8_layers = saved_fp8_layers(model, place);
  for (const auto& layer : s.fp8_layers) mine.fp8_layers.push_back(layer.first);
  s.fp8_experts = saved_fp8_experts(model, place);
  for (const ExpertFp8State& x : s.fp8_experts)
    if (mine.fp8_expert_layers.empty() || mine.fp8_expert_layers.back() != x.layer)
      mine.fp8_expert_layers.push_back(x.layer);
  std::vector<SafetensorsStream::Tensor>& entries = s.entries;
  for (const OwnedPiece& p : s.pieces) {
    const std::string entry = std::to_string(mine.pieces.size());
    entries.push_back({"param/" + entry, param_type, {p.hi - p.lo}});
    for (const auto& state : s.states)
      entries.push_back({std::string(state.first) + "/" + entry,
                         optimizer.state_bf16(state.second) ? SafeDType::BF16 : SafeDType::F32,
                         {p.hi - p.lo}});  // the moments at their dtype (bf16: 2 bytes)
    mine.pieces.push_back({p.view->spec->name, rank_slice(model, *p.view),
                           (int64_t)(p.lo - p.view->offset), (int64_t)(p.hi - p.view->offset),
                           entry});
  }
  for (int l : mine.expert_bias_layers)
    entries.push_back({"expert_bias/" + std::to_string(l), SafeDType::F32,
                       {(int64_t)model.moe_layers()[l].expert_bias.size()}});
  for (const auto& layer : s.fp8_layers)
    entries.push_back({"fp8/" + std::to_string(layer.first), SafeDType::F32,
                       {(int64_t)layer.second.size()}});
  for (const ExpertFp8State& x : s.fp8_experts)
    entries.push_back({"fp8/" + std::to_string(x.layer) + "/" + std::to_string(x.expert),
                       SafeDType::F32, {(int64_t)x.state.size()}});
  return s;
}

// The shard's data, in its entries' order, streamed from the device through one bounded buffer.
void stream_shard(SafetensorsStream& shard, const ShardContents& s, Transformer& model,
                  AdamW& optimizer, size_t param_bytes) {
  const kernels::Device dev = model.device();
  std::vector<uint8_t> buffer(size_t(4) << 20);
  // (from the device, or with CPU offload from host memory: `where` copies reach it)
  const auto stream = [&](kernels::Device where, const void* device, size_t bytes) {
    for (size_t done = 0; done < bytes; done += buffer.size()) {
      const size_t n = std::min(buffer.size(), bytes - done);
      kernels::memcpy_to_host(where, buffer.data(), static_cast<const uint8_t*>(device) + done, n);
      shard.write(buffer.data(), n);
    }
  };
  for (const OwnedPiece& p : s.pieces) {
    const int64_t n = p.hi - p.lo, at = p.lo - p.segment->flat_begin;
    const int64_t state = p.segment->state_offset + at;
    stream(p.segment->host ? kernels::Device::CPU : dev,
           static_cast<const uint8_t*>(p.segment->param) + at * param_bytes, n * param_bytes);
    for (const auto& kind_state : s.states)
      stream(optimizer.state_device(p.expert, state),
             optimizer.state(kind_state.second, p.expert, state),
             n * optimizer.state_bytes(kind_state.second));
  }
  for (int l : s.mine.expert_bias_layers) {
    const std::vector<float> bias = model.expert_bias(l);
    shard.write(bias.data(), bias.size() * sizeof(float));
  }
  for (const auto& layer : s.fp8_layers)
    shard.write(layer.second.data(), layer.second.size() * sizeof(float));
  for (const ExpertFp8State& x : s.fp8_experts)
    shard.write(x.state.data(), x.state.size() * sizeof(float));
}

// Every rank's entry of the manifest, in rank order, on every rank (each counts the bytes
// saved): once all have sent theirs, every shard is on disk.
std::vector<ManifestShard> gather_shards(Communicator& world, const ManifestShard& mine,
                                         const Transformer& model, SaveStats& stats) {
  JsonWriter entry;
  write_manifest_shard(entry, mine);
  std::vector<ManifestShard> shards;
  for (const std::string& text : all_gather_strings(world, entry.str(), model.device())) {
    shards.push_back(parse_manifest_shard(JsonDocument(text).root(), model.config().num_layers,
                                          "the shard list"));
    stats.total_file_bytes += shards.back().bytes;
    stats.rank_payload_bytes.push_back(shards.back().payload_bytes);
  }
  return shards;
}

// The manifest of this save: the run's model, layout, precision and position, every tensor's
// full shape and every rank's shard.
Manifest save_manifest(const TrainingPosition& position, const Transformer& model,
                       const TrainConfig& train, const ParallelConfig& parallel, DType storage,
                       bool save_optimizer, const ManifestData& data,
                       const std::vector<ManifestShard>& shards) {
  Manifest m;
  m.iteration = position.iteration;
  m.model = model.config();
  m.parallel = parallel;
  m.bf16 = storage == DType::BF16;
  m.fp16 = storage == DType::F16;
  m.optimizer = save_optimizer;
  m.seed = train.seed;
  m.global_batch_size = train.global_batch_size;
  m.adam_steps = position.adam_steps;
  m.skipped_steps = position.skipped_steps;
  m.skipped_in_a_row = position.skipped_in_a_row;
  m.has_loss_scaler = position.dynamic_loss_scale;
  m.loss_scaler = position.loss_scaler;
  m.fp8 = model.config().fp8;
  m.data = data;
  for (const ParamSpec& p : param_table(model.config())) {
    m.tensors.push_back(p.name);
    m.shapes.push_back(p.shape);
  }
  m.shards = shards;
  return m;
}

}  // namespace

bool CheckpointPlace::writes(const TensorView& view) const {
  if (mirror_copy) return false;  // DualPipe: the pair's first rank saves the stages
  if (zero_stage >= 1) return true;  // the owned slices are disjoint over the replicas
  return (view.expert ? expert_replica : dense_replica) == 0;
}

SaveStats save_checkpoint(const std::string& dir, const TrainingPosition& position,
                          Transformer& model, AdamW& optimizer, const CheckpointPlace& place,
                          Communicator& world, const TrainConfig& train,
                          const ParallelConfig& parallel, bool save_optimizer,
                          const ManifestData& data) {
  const kernels::Device dev = model.device();
  model.data_parallel().drain();  // --overlap-param-gather: the updated parameters, complete
  if (model.expert_data_parallel()) model.expert_data_parallel()->drain();
  kernels::synchronize(dev);
  world.barrier();
  const double t0 = now_seconds();
  SaveStats stats;
  stats.folder = iteration_folder(dir, position.iteration);
  make_folders(stats.folder);
  // A folder being rewritten is not a checkpoint until its new manifest lands.
  if (world.rank() == 0) std::remove((stats.folder + "/manifest.json").c_str());
  world.barrier();

  // The shard: every piece's entries declared (their sizes make the header), then streamed
  // from the device through one bounded buffer, in that order.
  const DType storage = model.data_parallel().storage();
  const size_t param_bytes = dtype_size(storage);
  const SafeDType param_type = float_type(train.precision());
  ShardContents contents =
      declare_shard(model, optimizer, place, world.rank(), param_type, save_optimizer);
  ManifestShard& mine = contents.mine;
  SafetensorsStream shard(stats.folder + "/" + mine.file, contents.entries,
                          {{"format", "paralab checkpoint shard"},
                           {"rank", std::to_string(world.rank())}});
  stream_shard(shard, contents, model, optimizer, param_bytes);
  const SafetensorsStream::Written written = shard.commit();
  mine.bytes = stats.file_bytes = written.file_bytes;
  mine.crc32c = written.crc32c;
  mine.payload_bytes = stats.payload_bytes = written.payload_bytes;

  // Every shard is on disk once every rank has sent its entry: rank 0 writes the manifest.
  const std::vector<ManifestShard> shards = gather_shards(world, mine, model, stats);
  if (world.rank() == 0) {
    const Manifest m = save_manifest(position, model, train, parallel, storage, save_optimizer,
                                     data, shards);
    AtomicFile manifest(stats.folder + "/manifest.json");
    manifest.write(manifest_json(m));
    manifest.commit();
    stats.total_file_bytes += manifest.bytes();
    AtomicFile latest(dir + "/latest");
    latest.write(std::to_string(position.iteration) + "\n");
    latest.commit();
  }
  world.barrier();
  stats.seconds = now_seconds() - t0;
  return stats;
}

}  // namespace paralab
