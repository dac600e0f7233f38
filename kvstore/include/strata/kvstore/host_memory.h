#pragma once
// Memory a pool can take on this host, and faulting a pool in ahead of use: shared by the G2
// host tier's pools and the `strata kvstore` daemon's transport memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strata::kvstore {

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

}  // namespace strata::kvstore
