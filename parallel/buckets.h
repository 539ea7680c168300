// parallel/buckets.h: how data parallelism cuts the flat parameter vector. Pure arithmetic,
// shared by parallel/data_parallel (which allocates and communicates by it) and
// instrument/plan (which predicts bytes and calls from it).
//
// Units. The model uses its parameters in units, each a contiguous range of the flat vector
// in table order: unit 0 the embedding, units 1..L the layers, unit L+1 the head (final norm,
// output weight). Backward finishes the units in reverse order, so a unit's gradients are
// final once its backward is done (the tied embedding of gpt lives in unit 0, which
// finishes last).
//
// Buckets. A bucket is a run of whole consecutive units, formed from the last unit backwards
// until it holds at least --ddp-bucket-size elements (Megatron forms buckets the same way,
// in reverse parameter order, but splits at parameters; a unit is our unit of readiness).
// ZeRO-3 makes every unit its own bucket: it gathers and reduces layer by layer. A bucket is
// ready for reduction when its lowest unit's backward is done.
//
// Chunks. Under pipeline parallelism a rank holds v model chunks (interleaved schedules),
// whose backwards run as separate actions, in any order the schedule says. A bucket never
// spans two chunks, so it is always finished by one chunk's backward (unit_chunk: the chunk
// of each unit; empty: one chunk).
//
// Shards (ZeRO >= 1, Megatron's distributed optimizer): every bucket is padded to a multiple
// of dp, padded = dp * ceil(n / dp), and rank r owns the r-th slice of every bucket. A
// bucket's reduce-scatter then hands each rank exactly its slice, and its all-gather
// rebuilds the bucket from the slices. The rank's shard is its slices of all buckets, in
// bucket order: shard elements = sum over buckets of padded / dp.
//
// defines: Bucket, BucketLayout, chunk_of, chunk_first_unit, make_bucket_layout,
//          owned_elements
#pragma once
#include <cstdint>
#include <vector>

namespace paralab {

struct Bucket {
  int unit_lo = 0, unit_hi = 0;  // units [unit_lo, unit_hi], inclusive
  int64_t begin = 0, end = 0;    // flat elements [begin, end)
  int64_t padded = 0;            // dp * slice
  int64_t slice = 0;             // elements each rank owns: ceil((end - begin) / dp)
  int64_t shard_offset = 0;      // where this bucket's slice starts in the rank's shard
  int64_t numel() const { return end - begin; }
};

struct BucketLayout {
  std::vector<Bucket> buckets;   // in reduction order: the last units first
  std::vector<int> bucket_of;    // per unit
  int64_t shard_numel = 0;       // sum of slices
  int64_t total = 0;             // parameters
  int64_t padded_total = 0;      // sum of padded bucket sizes
};

// The chunk of unit u (0 when unit_chunk is empty: everything is one chunk).
inline int chunk_of(const std::vector<int>& unit_chunk, int u) {
  return unit_chunk.empty() ? 0 : unit_chunk[u];
}
// The lowest unit of u's chunk: its backward is the last of the chunk's backward action.
inline int chunk_first_unit(const std::vector<int>& unit_chunk, int u) {
  while (u > 0 && chunk_of(unit_chunk, u - 1) == chunk_of(unit_chunk, u)) --u;
  return u;
}

// unit_begin: size U+1, unit u is [unit_begin[u], unit_begin[u+1]). bucket_size <= 0 puts
// everything of a chunk in one bucket; one_unit_per_bucket (ZeRO-3) ignores bucket_size.
inline BucketLayout make_bucket_layout(const std::vector<int64_t>& unit_begin,
                                       int64_t bucket_size, int dp, bool one_unit_per_bucket,
                                       const std::vector<int>& unit_chunk = {}) {
  BucketLayout l;
  const int U = (int)unit_begin.size() - 1;
  l.total = unit_begin[U];
  l.bucket_of.assign(U, 0);
  int hi = U - 1;
  while (hi >= 0) {
    int lo = hi;
    if (!one_unit_per_bucket)
      while (lo > 0 && chunk_of(unit_chunk, lo - 1) == chunk_of(unit_chunk, hi) &&
             (bucket_size <= 0 || unit_begin[hi + 1] - unit_begin[lo] < bucket_size))
        --lo;
    Bucket b;
    b.unit_lo = lo;
    b.unit_hi = hi;
    b.begin = unit_begin[lo];
    b.end = unit_begin[hi + 1];
    b.slice = (b.numel() + dp - 1) / dp;
    b.padded = b.slice * dp;
    b.shard_offset = l.shard_numel;
    l.shard_numel += b.slice;
    l.padded_total += b.padded;
    for (int u = lo; u <= hi; ++u) l.bucket_of[u] = (int)l.buckets.size();
    l.buckets.push_back(b);
    hi = lo - 1;
  }
  return l;
}

// The real (not padding) elements dp rank r owns under ZeRO >= 1: its slice of each bucket,
// cut at the bucket's end (the last ranks' slices hold the padding).
inline int64_t owned_elements(const BucketLayout& l, int r) {
  int64_t n = 0;
  for (const Bucket& b : l.buckets) {
    const int64_t first = (int64_t)r * b.slice;
    n += first >= b.numel() ? 0 : (b.numel() - first < b.slice ? b.numel() - first : b.slice);
  }
  return n;
}

}  // namespace paralab
