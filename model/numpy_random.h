// model/numpy_random.h: the two NumPy random streams megatron-core's datasets draw from, bit for
// bit, so that paralab builds the same document, sample and shuffle indices and the same mock
// data as Megatron does with the same seed.
//
//  - numpy.random.RandomState(seed).shuffle(a) (gpt_dataset.py's document and shuffle indices):
//    the legacy Mersenne Twister. Seeding is MT19937's init_genrand (numpy's mt19937_seed), so
//    std::mt19937(seed) is the same generator; the shuffle is Fisher-Yates from the end, each j
//    drawn by random_interval(i): a 32-bit draw masked to the smallest all-ones mask >= i,
//    rejected while above i (a 64-bit draw, high word first, when i >= 2^32)
//    (numpy/random/mtrand.pyx shuffle, numpy/random/src/distributions/distributions.c
//    random_interval, numpy/random/src/mt19937/mt19937.c mt19937_seed).
//  - numpy.random.default_rng(seed).integers(low, high, size, dtype=int32) (the mock dataset's
//    sequence lengths, MockGPTLowLevelDataset): PCG64 (128-bit LCG, XSL-RR output) seeded through
//    SeedSequence(seed).generate_state(4, uint64) (numpy/random/bit_generator.pyx: the
//    hashmix / mix entropy pool), 32-bit draws the low then the high half of each 64-bit output
//    (pcg64_next32), bounded by Lemire's multiply-and-reject (buffered_bounded_lemire_uint32).
//
// tests/scripts/megatron_data.py holds both to NumPy itself.
//
// defines: NumpyRandomState, Pcg64
#pragma once
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace paralab {

// numpy.random.RandomState: seed in [0, 2^32), as NumPy's own check.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}
  // A uniform integer in [0, max] by NumPy's masked rejection.
  uint64_t random_interval(uint64_t max);
  // RandomState.shuffle of a 1-D array, in place.
  template <class T>
  void shuffle(std::vector<T>& a) {
    for (size_t i = a.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(random_interval(i - 1));
      std::swap(a[i - 1], a[j]);
    }
  }

 private:
  std::mt19937 mt_;
};

// numpy.random.default_rng(seed) (PCG64 over SeedSequence(seed)), its 32-bit bounded integers.
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed);
  uint64_t next64();
  uint32_t next32();
  // Generator.integers(low, high, dtype=int32): uniform in [low, high).
  int32_t integer(int32_t low, int32_t high);

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

}  // namespace paralab
