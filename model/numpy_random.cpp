// model/numpy_random.cpp: NumPy's legacy RandomState interval draw and PCG64 with its
// SeedSequence seeding and Lemire's bounded integers (the sources are named in the header).
#include "model/numpy_random.h"

namespace paralab {

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;  // the smallest all-ones mask >= max
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (static_cast<uint64_t>(mt_()) & mask)) > max) {
    }
  } else {
    // mt19937_next64: the first draw is the high word
    auto next64 = [&] { const uint64_t hi = mt_(); return hi << 32 | mt_(); };
    while ((value = (next64() & mask)) > max) {
    }
  }
  return value;
}

namespace {

// SeedSequence's hash constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd,
                   kMultB = 0x58f38ded, kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16, kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// SeedSequence(seed).generate_state(4, uint64).
void seed_sequence_state(uint64_t seed, uint64_t out[4]) {
  std::vector<uint32_t> entropy;  // the seed as 32-bit words, least significant first
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0, hash_const);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (size_t src = kPoolSize; src < entropy.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      pool[dst] = mix(pool[dst], hashmix(entropy[src], hash_const));
  uint32_t words[8];
  uint32_t b = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t w = pool[i % kPoolSize];
    w ^= b;
    b *= kMultB;
    w *= b;
    w ^= w >> kXShift;
    words[i] = w;
  }
  for (int i = 0; i < 4; ++i)  // little-endian pairs viewed as uint64
    out[i] = static_cast<uint64_t>(words[2 * i]) | static_cast<uint64_t>(words[2 * i + 1]) << 32;
}

using u128 = unsigned __int128;
const u128 kPcgMultiplier = (static_cast<u128>(2549297995355413924ULL) << 64) |
                            4865540595714422341ULL;

}  // namespace

Pcg64::Pcg64(uint64_t seed) {
  uint64_t v[4];
  seed_sequence_state(seed, v);
  const u128 initstate = static_cast<u128>(v[0]) << 64 | v[1];
  const u128 initseq = static_cast<u128>(v[2]) << 64 | v[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = initseq << 1 | 1;
  state_ = state_ * kPcgMultiplier + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMultiplier + inc_;
}

uint64_t Pcg64::next64() {
  state_ = state_ * kPcgMultiplier + inc_;  // step, then the XSL-RR output
  const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t Pcg64::next32() {
  if (has_half_) {
    has_half_ = false;
    return half_;
  }
  const uint64_t next = next64();
  has_half_ = true;
  half_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

int32_t Pcg64::integer(int32_t low, int32_t high) {
  const uint32_t rng = static_cast<uint32_t>(high - 1 - low);  // the closed range's width
  if (rng == 0) return low;
  const uint32_t rng_excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(next32()) * rng_excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(next32()) * rng_excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return low + static_cast<int32_t>(m >> 32);
}

}  // namespace paralab
