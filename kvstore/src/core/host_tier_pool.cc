// The host tier's pool memory.
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it (the kernel then says EINVAL)
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "host_tier_internal.h"
#include "strata/common/file_util.h"
#include "strata/common/logging.h"

namespace strata::kvstore::internal {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;

// Anonymous memory for `bytes` starting at a 2 MiB boundary, so that transparent huge pages can
// back all of it; MAP_FAILED on failure.
void* MapAligned(size_t bytes) {
  const size_t mapped = (bytes + kPage - 1) / kPage * kPage;
  const size_t span = mapped + kHugePage;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return MAP_FAILED;
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > base) munmap(m, aligned - base);
  const uintptr_t end = aligned + mapped;
  if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

absl::StatusOr<HostPool> HostPool::Create(
    size_t bytes, const std::function<absl::StatusOr<void*>(size_t)>& allocate) {
  if (allocate) {
    absl::StatusOr<void*> memory = allocate(bytes);
    if (!memory.ok()) return memory.status();
    if (*memory == nullptr) return absl::InternalError("host tier: allocate returned null");
    return HostPool(static_cast<std::byte*>(*memory), bytes, /*pinned=*/true, /*owned=*/false);
  }
  if (absl::Status fits = kvstore::CheckMemoryFits(bytes, "host tier pool"); !fits.ok()) {
    return fits;
  }
  void* p = MapAligned(bytes);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host tier: mmap of ", bytes, " bytes failed: ", std::strerror(errno)));
  }
  // Huge pages before the pages exist: fewer TLB misses on big copies, and faulting the pool in
  // is several times faster (advisory: without THP the pool gets 4 KiB pages).
  madvise(p, bytes, MADV_HUGEPAGE);
  kvstore::PopulatePages(static_cast<std::byte*>(p), bytes);
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
