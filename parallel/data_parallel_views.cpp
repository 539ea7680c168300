// parallel/data_parallel_views.cpp: DataParallel's whole-model views, for initialisation,
// tests and checkpoints: load_params scatters a full fp32 parameter vector into this rank's
// buffers (its shard at stage 3), gather_params and gather_grads rebuild the full, unpadded
// vectors on the host, one bucket at a time. Collective over dp; bf16 values are rounded on
// the host before the copy in and widened after the copy out (data_parallel_impl.h).
#include <string>
#include <vector>
#include "kernels/ops.h"                  // memcpy_from_host, memcpy_to_host, memcpy_device
#include "parallel/data_parallel_impl.h"  // DataParallel::Impl, misuse

namespace paralab {

const char* DataParallel::Impl::gather_bucket(const char* slice, bool host, size_t j,
                                              Buffer<char>& tmp, Category c) {
  const Bucket& b = layout.buckets[j];
  allocate(tmp, b.padded, c);
  if (host) {  // CPU offload: the rank's slice up first, then in place
    char* mine = at(tmp, rank * b.slice);
    copy_to_device(device, mine, slice, b.slice * es);
    if (communicates(b)) dp->all_gather(mine, tmp.data(), b.slice, dtype);
  } else if (communicates(b)) {
    dp->all_gather(slice, tmp.data(), b.slice, dtype);
  } else {
    kernels::memcpy_device(device, tmp.data(), slice, b.slice * es);
  }
  return tmp.data();
}

// ---- whole-model views -----------------------------------------------------------------

void DataParallel::load_params(const std::vector<float>& full) {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  if ((int64_t)full.size() != l.total)
    misuse("load_params: got " + std::to_string(full.size()) + " values for " +
           std::to_string(l.total) + " parameters");
  drain();
  const std::vector<char> host = m.to_storage(full);  // rounded once, on the host
  for (const StoredSegment& s : stored_params())
    kernels::memcpy_from_host(s.device, s.param, host.data() + s.flat_begin * m.es,
                              s.count * m.es);
  params_written();
}

std::vector<DataParallel::StoredSegment> DataParallel::stored_params() {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  drain();
  if (m.stage == 0) return {{0, l.total, m.at(m.params, 0), m.device}};
  std::vector<StoredSegment> out;
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    const int64_t n = m.owned_hi(b) - m.owned_lo(b);
    if (m.stage < 3)
      out.push_back({b.begin, b.numel(), m.at(m.params, m.padded_pos[j]), m.device});
    else if (n > 0 && m.opt.offload_params)  // the shard is on the host
      out.push_back({m.owned_lo(b), n, m.at(m.host_params, b.shard_offset),
                     kernels::Device::CPU});
    else if (n > 0)
      out.push_back({m.owned_lo(b), n, m.at(m.params, b.shard_offset), m.device});
  }
  return out;
}

void DataParallel::params_written() {
  Impl& m = *impl_;
  // --fp8-param-gather at ZeRO-1/2: every element exact again, none from an FP8 gather
  m.fp8_gathered.assign(m.fp8_gathered.size(), false);
  // CPU offload: the host copies of the offloaded parameters, from the device's
  if (m.opt.offload_params) return;
  for (const OffloadCopy& c : m.copies)
    copy_to_host(m.device, m.at(m.host_params, c.state_begin),
                 m.at(m.params, m.device_param_pos(c.bucket)), c.count * m.es);
}

std::vector<float> DataParallel::gather_params() {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  std::vector<char> raw(l.total * m.es);
  m.wait_param_gathers();
  if (m.stage == 0) {
    kernels::memcpy_to_host(m.device, raw.data(), m.params.data(), raw.size());
    return m.from_storage(raw);
  }
  Buffer<char> tmp;  // stage 3: one bucket at a time
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    const bool host = m.opt.offload_params;
    const char* src;
    if (m.stage == 3)
      src = m.gather_bucket(m.at(host ? m.host_params : m.params, b.shard_offset), host, j, tmp,
                            Category::PARAMS);
    else if (m.fp8_bucket_has((int)j))  // decoded slices: the owners' exact ones gathered
      src = m.gather_bucket(m.at(m.params, m.padded_pos[j] + m.rank * b.slice), false, j, tmp,
                            Category::PARAMS);
    else
      src = m.at(m.params, m.padded_pos[j]);
    kernels::memcpy_to_host(m.device, raw.data() + b.begin * m.es, src, b.numel() * m.es);
  }
  return m.from_storage(raw);
}

std::vector<float> DataParallel::gather_grads() {
  Impl& m = *impl_;
  const BucketLayout& l = m.layout;
  std::vector<char> raw(l.total * m.es);
  if (m.stage == 0) {
    kernels::memcpy_to_host(m.device, raw.data(), m.grads.data(), raw.size());
    return m.from_storage(raw);
  }
  Buffer<char> tmp;  // stages 2-3: one bucket at a time
  for (size_t j = 0; j < l.buckets.size(); ++j) {
    const Bucket& b = l.buckets[j];
    const char* src;
    if (m.stage == 1) {
      // The full buffer holds this rank's summed slice; the rest is its local gradient.
      char* full = m.at(m.grads, m.padded_pos[j]);
      if (m.communicates(b)) m.dp->all_gather(full + m.rank * b.slice * m.es, full, b.slice, m.dtype);
      src = full;
    } else {  // a host bucket's sum lives on the host (CPU offload)
      const bool host = m.on_host((int)j);
      src = m.gather_bucket(host ? m.at(m.host_grads, b.shard_offset)
                                 : m.at(m.grads, m.device_grad_pos((int)j)),
                            host, j, tmp, Category::GRADS);
    }
    kernels::memcpy_to_host(m.device, raw.data() + b.begin * m.es, src, b.numel() * m.es);
  }
  return m.from_storage(raw);
}

}  // namespace paralab
