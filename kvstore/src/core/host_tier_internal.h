#pragma once
// Pieces of the G2 host tier shared by its implementation files (and benchmarked/tested).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata::kvstore::internal {

// Faults every page of [p, p + bytes) in for writing now, contents kept, so that serving never
// pays a first-touch fault: the host tier's own pools and the kvstore daemon's transport memory.
void PopulatePages(std::byte* p, size_t bytes);

// How much memory this process could still fault in: the kernel's estimate for the machine and
// the room left under every memory limit of its cgroup and the cgroup's ancestors (v2, or v1's
// memory controller), where the file page cache charged to a cgroup counts as room (it is
// reclaimed before anything is OOM-killed). -1 where a figure is not known.
struct MemoryRoom {
  int64_t available = -1;    // MemAvailable of /proc/meminfo
  int64_t cgroup_room = -1;  // the least limit - (usage - file cache), cgroup and ancestors
  std::string cgroup;        // the cgroup holding that least room, for the message
};
// Reads /proc/meminfo, /proc/self/cgroup and the cgroup files under `proc_root` and
// `cgroup_root` (other roots are for tests).
MemoryRoom ReadMemoryRoom(absl::string_view proc_root = "/proc",
                          absl::string_view cgroup_root = "/sys/fs/cgroup");
// OK if `bytes` fit in `room`, else ResourceExhausted naming `what` and what there is. A pool
// that is faulted in whole (as the host tier's and the kvstore daemon's are) and does not fit
// would get the process OOM-killed at start, or push the machine into reclaim until it is.
absl::Status CheckMemoryFits(size_t bytes, absl::string_view what, const MemoryRoom& room);
inline absl::Status CheckMemoryFits(size_t bytes, absl::string_view what) {
  return CheckMemoryFits(bytes, what, ReadMemoryRoom());
}

// The pool's memory: caller-supplied or an mmap'ed region this object unmaps.
class HostPool {
 public:
  // `allocate` null: anonymous mmap, prefaulted, mlock'ed when permitted (else a warning and
  // pinned() false). Otherwise the caller's memory, not freed here.
  static absl::StatusOr<HostPool> Create(
      size_t bytes, const std::function<absl::StatusOr<void*>(size_t)>& allocate);
  HostPool(HostPool&& other) noexcept;
  HostPool& operator=(HostPool&&) = delete;
  HostPool(const HostPool&) = delete;
  ~HostPool();

  std::byte* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  HostPool(std::byte* base, size_t bytes, bool pinned, bool owned)
      : base_(base), bytes_(bytes), pinned_(pinned), owned_(owned) {}
  std::byte* base_;
  size_t bytes_;
  bool pinned_;
  bool owned_;
};

}  // namespace strata::kvstore::internal
