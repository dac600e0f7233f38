// The host tier's pool memory and its checksumming copy.
#include <sys/mman.h>
#include <xxh_x86dispatch.h>  // XXH3 with runtime AVX2/AVX-512 selection
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "host_tier_internal.h"
#include "strata/common/logging.h"
#include "strata/kvstore/tier.h"

namespace strata::kvstore::internal {
namespace {

// Must equal the seed of BlockChecksum (tier.cc); host_tier_test checks that the two agree.
constexpr uint64_t kChecksumSeed = 0x73747261'74616b76ULL;
// Small enough to stay in L2 between the copy and the hash.
constexpr size_t kChunkBytes = 64 * 1024;

}  // namespace

absl::StatusOr<HostPool> HostPool::Create(
    size_t bytes, const std::function<absl::StatusOr<void*>(size_t)>& allocate) {
  if (allocate) {
    absl::StatusOr<void*> memory = allocate(bytes);
    if (!memory.ok()) return memory.status();
    if (*memory == nullptr) return absl::InternalError("host tier: allocate returned null");
    return HostPool(static_cast<std::byte*>(*memory), bytes, /*pinned=*/true, /*owned=*/false);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host tier: mmap of ", bytes, " bytes failed: ", std::strerror(errno)));
  }
  madvise(p, bytes, MADV_HUGEPAGE);  // fewer TLB misses on big copies; advisory only
  bool pinned = mlock(p, bytes) == 0;
  if (!pinned) {
    STRATA_LOG(Warning) << "host tier: mlock of " << bytes << " bytes failed ("
                        << std::strerror(errno)
                        << "); the pool works unpinned (raise RLIMIT_MEMLOCK to pin it)";
  }
  return HostPool(static_cast<std::byte*>(p), bytes, pinned, /*owned=*/true);
}

HostPool::HostPool(HostPool&& other) noexcept
    : base_(other.base_), bytes_(other.bytes_), pinned_(other.pinned_), owned_(other.owned_) {
  other.base_ = nullptr;
  other.owned_ = false;
}

HostPool::~HostPool() {
  if (owned_ && base_ != nullptr) munmap(base_, bytes_);
}

uint64_t CopyWithChecksum(std::span<std::byte> dst, std::span<const std::byte> src) {
  STRATA_CHECK(dst.size() == src.size()) << dst.size() << " vs " << src.size();
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  STRATA_CHECK(state != nullptr) << "XXH3_createState failed";
  XXH3_64bits_reset_withSeed(state.get(), kChecksumSeed);
  for (size_t off = 0; off < src.size(); off += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, src.size() - off);
    std::memcpy(dst.data() + off, src.data() + off, n);
    XXH3_64bits_update_dispatch(state.get(), dst.data() + off, n);
  }
  return XXH3_64bits_digest(state.get());
}

uint64_t FastBlockChecksum(std::span<const std::byte> data) {
  return XXH3_64bits_withSeed_dispatch(data.data(), data.size(), kChecksumSeed);
}

}  // namespace strata::kvstore::internal
