// The host tier's pool memory.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "host_tier_internal.h"
#include "strata/common/logging.h"

namespace strata::kvstore::internal {
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

}  // namespace strata::kvstore::internal
