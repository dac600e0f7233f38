#include "strata/kvstore/tier.h"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "strata/common/logging.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define STRATA_KV_X86 1
#endif

namespace strata::kvstore {
namespace {

// BlockChecksum, exactly (both paths below compute it):
//   Data is cut into 64-byte stripes of eight little-endian u64 lanes; a last partial stripe is
//   zero-padded. Lane i of stripe s, value v, key k = kLaneKey[i] + s * kKeyStep:
//       m = v ^ k;   acc[i] += lo32(m) * hi32(m) + v          (mod 2^64)
//   After every 16th full stripe (1 KiB): acc[i] = (acc[i] ^ (acc[i] >> 47)) * kScramble.
//   Result: h = kSeed ^ (length * kMul); per lane h = rotl(h ^ Mix(acc[i]), 27) * kMul + i;
//   then Mix(h), Mix being splitmix64's finalizer.
// The key schedule makes the sum position dependent (swapped or misplaced stripes change it),
// the product and the scramble make it nonlinear, and Mix spreads every bit over the result.
constexpr uint64_t kSeed = 0x73747261'74616b76ULL;  // "stratakv"
constexpr uint64_t kMul = 0x9E3779B9'7F4A7C15ULL;   // 2^64 / golden ratio, odd
constexpr uint64_t kKeyStep = 0xD6E8FEB8'6659FD93ULL;
constexpr uint64_t kScramble = 0x9E3779B1ULL;  // 32-bit odd: the vector path multiplies 64x32
constexpr size_t kStripe = 64;
constexpr size_t kLanes = 8;
constexpr size_t kStripesPerScramble = 16;

constexpr uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D'1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB'133111EBULL;
  return x ^ (x >> 31);
}

constexpr std::array<uint64_t, kLanes> MakeLaneKeys() {
  std::array<uint64_t, kLanes> keys{};
  for (size_t i = 0; i < kLanes; ++i) keys[i] = Mix(kSeed + (i + 1) * kMul);
  return keys;
}
constexpr std::array<uint64_t, kLanes> kLaneKey = MakeLaneKeys();

// The running state: accumulators and the current stripe's keys.
struct State {
  alignas(32) uint64_t acc[kLanes];
  alignas(32) uint64_t key[kLanes];
  State() {
    for (size_t i = 0; i < kLanes; ++i) {
      acc[i] = 0;
      key[i] = kLaneKey[i];
    }
  }
};

inline uint64_t LoadLe64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

inline void StripeScalar(State& st, const std::byte* p) {
  for (size_t i = 0; i < kLanes; ++i) {
    const uint64_t v = LoadLe64(p + 8 * i);
    const uint64_t m = v ^ st.key[i];
    st.acc[i] += (m & 0xffffffffULL) * (m >> 32) + v;
    st.key[i] += kKeyStep;
  }
}

inline void ScrambleScalar(State& st) {
  for (uint64_t& a : st.acc) a = (a ^ (a >> 47)) * kScramble;
}

// The full stripes [0, n) of a buffer; copies them to dst when dst is non-null.
void StripesScalar(State& st, const std::byte* src, std::byte* dst, size_t n) {
  for (size_t s = 0; s < n; ++s) {
    if (dst != nullptr) std::memcpy(dst + s * kStripe, src + s * kStripe, kStripe);
    StripeScalar(st, src + s * kStripe);
    if ((s + 1) % kStripesPerScramble == 0) ScrambleScalar(st);
  }
}

#ifdef STRATA_KV_X86
#define STRATA_KV_AVX2 __attribute__((target("avx2")))

STRATA_KV_AVX2 inline __m256i LaneUpdateAvx2(__m256i acc, __m256i v, __m256i key) {
  const __m256i m = _mm256_xor_si256(v, key);
  const __m256i prod = _mm256_mul_epu32(m, _mm256_srli_epi64(m, 32));
  return _mm256_add_epi64(acc, _mm256_add_epi64(prod, v));
}

STRATA_KV_AVX2 inline __m256i ScrambleAvx2(__m256i a) {
  const __m256i scramble = _mm256_set1_epi64x(static_cast<long long>(kScramble));
  a = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47));
  const __m256i lo = _mm256_mul_epu32(a, scramble);  // a * kScramble, 64x32 bits, in two halves
  const __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), scramble);
  return _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
}

// Software prefetch distance: a copy out of DRAM keeps more lines in flight than the
// hardware prefetcher alone gives one stream (G2 Get went from ~0.77 to 0.87-1.0 of memcpy).
// Prefetching past the end of the source is harmless: a prefetch never faults.
constexpr size_t kPrefetchBytes = 1024;

// The same arithmetic on two 256-bit vectors (lanes 0-3 and 4-7). Mode selects whether the
// loaded stripe is also stored to dst (from the same registers: one pass over memory), and
// with which stores.
enum class StoreMode { kNone, kCached, kStreamed };

template <StoreMode Mode>
STRATA_KV_AVX2 void StripesAvx2(State& st, const std::byte* src, std::byte* dst, size_t n) {
  __m256i acc0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(st.acc));
  __m256i acc1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(st.acc + 4));
  __m256i key0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(st.key));
  __m256i key1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(st.key + 4));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(kKeyStep));
  for (size_t s = 0; s < n; ++s) {
    const auto* in = reinterpret_cast<const __m256i*>(src + s * kStripe);
    _mm_prefetch(reinterpret_cast<const char*>(in) + kPrefetchBytes, _MM_HINT_T0);
    const __m256i v0 = _mm256_loadu_si256(in);
    const __m256i v1 = _mm256_loadu_si256(in + 1);
    if constexpr (Mode == StoreMode::kCached) {
      auto* out = reinterpret_cast<__m256i*>(dst + s * kStripe);
      _mm256_storeu_si256(out, v0);
      _mm256_storeu_si256(out + 1, v1);
    } else if constexpr (Mode == StoreMode::kStreamed) {
      auto* out = reinterpret_cast<__m256i*>(dst + s * kStripe);
      _mm256_stream_si256(out, v0);
      _mm256_stream_si256(out + 1, v1);
    }
    acc0 = LaneUpdateAvx2(acc0, v0, key0);
    acc1 = LaneUpdateAvx2(acc1, v1, key1);
    key0 = _mm256_add_epi64(key0, step);
    key1 = _mm256_add_epi64(key1, step);
    if ((s + 1) % kStripesPerScramble == 0) {
      acc0 = ScrambleAvx2(acc0);
      acc1 = ScrambleAvx2(acc1);
    }
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(st.acc), acc0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(st.acc + 4), acc1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(st.key), key0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(st.key + 4), key1);
  if constexpr (Mode == StoreMode::kStreamed) _mm_sfence();  // order before later plain stores
}

// Decided once at static initialization. A BlockChecksum called by another file's static
// initializer before this one runs sees false and takes the portable path: same value.
const bool kHaveAvx2 = [] {
  __builtin_cpu_init();  // the CPU model may not be probed yet this early
  return __builtin_cpu_supports("avx2") != 0;
}();
#endif

void Stripes(State& st, const std::byte* src, std::byte* dst, size_t n,
             CopyDestination where = CopyDestination::kCached) {
#ifdef STRATA_KV_X86
  if (kHaveAvx2) {
    if (dst == nullptr) {
      StripesAvx2<StoreMode::kNone>(st, src, nullptr, n);
    } else if (where == CopyDestination::kStreamed && reinterpret_cast<uintptr_t>(dst) % 32 == 0) {
      StripesAvx2<StoreMode::kStreamed>(st, src, dst, n);
    } else {
      StripesAvx2<StoreMode::kCached>(st, src, dst, n);
    }
    return;
  }
#endif
  StripesScalar(st, src, dst, n);
}

// Hashes (and copies, when dst is set) the last partial stripe, then folds the state.
uint64_t Finish(State& st, const std::byte* src, std::byte* dst, size_t size) {
  const size_t full = size / kStripe * kStripe;
  if (const size_t rest = size - full; rest > 0) {
    std::byte tail[kStripe] = {};
    std::memcpy(tail, src + full, rest);
    if (dst != nullptr) std::memcpy(dst + full, tail, rest);
    StripeScalar(st, tail);
  }
  uint64_t h = kSeed ^ (static_cast<uint64_t>(size) * kMul);
  for (size_t i = 0; i < kLanes; ++i) h = std::rotl(h ^ Mix(st.acc[i]), 27) * kMul + i;
  return Mix(h);
}

}  // namespace

namespace internal {
// The portable path alone, so tests can check that both paths agree on this machine.
uint64_t PortableBlockChecksumForTest(std::span<const std::byte> data) {
  State st;
  StripesScalar(st, data.data(), nullptr, data.size() / kStripe);
  return Finish(st, data.data(), nullptr, data.size());
}
}  // namespace internal

std::string_view TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kDevice:
      return "device";
    case TierKind::kHost:
      return "host";
    case TierKind::kDisk:
      return "disk";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

uint64_t BlockChecksum(std::span<const std::byte> data) {
  State st;
  Stripes(st, data.data(), nullptr, data.size() / kStripe);
  return Finish(st, data.data(), nullptr, data.size());
}

uint64_t CopyWithBlockChecksum(std::span<std::byte> dst, std::span<const std::byte> src,
                               CopyDestination where) {
  STRATA_CHECK(dst.size() == src.size()) << dst.size() << " vs " << src.size();
  State st;
  Stripes(st, src.data(), dst.data(), src.size() / kStripe, where);
  return Finish(st, src.data(), dst.data(), src.size());
}

int Tier::CountPrefix(std::span<const BlockHash> hashes) const {
  int n = 0;
  for (BlockHash h : hashes) {
    if (!Contains(h)) break;
    ++n;
  }
  return n;
}

}  // namespace strata::kvstore
