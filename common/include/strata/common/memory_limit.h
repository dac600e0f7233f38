#pragma once
// Memory-based load shedding: this process's resident set size, a limit for it (given, or the
// cgroup v2 memory.max less headroom), and a watch that samples the one against the other on a
// thread of its own so that the request path reads an atomic flag instead of /proc.
//
// The front ends refuse new requests (503 with Retry-After) while the watch says the process is
// over its limit, so the kernel's OOM killer does not end every request the process holds.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace strata {

// Resident bytes of this process: the second field of /proc/self/statm times the page size.
absl::StatusOr<int64_t> ReadResidentBytes();

// The memory.max of the cgroup v2 that `proc_cgroup` (the text of /proc/self/cgroup) names,
// read under `cgroup_root` (normally /sys/fs/cgroup). nullopt when there is no cgroup v2 line,
// the file cannot be read, or it says "max" (no limit).
std::optional<int64_t> CgroupMemoryMax(const std::string& proc_cgroup,
                                       const std::string& cgroup_root);
// The same for this process.
std::optional<int64_t> ThisCgroupMemoryMax();

// The limit `--max-memory-mb` asks for, in bytes (0 = no limit): `flag_mb` > 0 is itself; 0 is
// off; -1 (auto) is `cgroup_max` less a tenth of it (at least 64 MiB, so the process is refused
// new work before the OOM killer acts), or off when there is no cgroup limit.
// InvalidArgument for other negative values.
absl::StatusOr<int64_t> ResolveMemoryLimit(int64_t flag_mb, std::optional<int64_t> cgroup_max);

// Samples a memory reading every `interval` and keeps whether it exceeds the limit.
// Thread-safety: every method may be called from any thread. The destructor stops the sampler.
class MemoryWatch {
 public:
  using Reader = std::function<absl::StatusOr<int64_t>()>;

  // `limit_bytes` > 0. The first sample is taken before the constructor returns. A reading that
  // fails keeps the last good value.
  MemoryWatch(int64_t limit_bytes, absl::Duration interval, Reader read = ReadResidentBytes);
  ~MemoryWatch();
  MemoryWatch(const MemoryWatch&) = delete;
  MemoryWatch& operator=(const MemoryWatch&) = delete;

  // True while the last sample was above the limit.
  bool over_limit() const { return over_.load(std::memory_order_relaxed); }
  int64_t resident_bytes() const { return resident_.load(std::memory_order_relaxed); }
  int64_t limit_bytes() const { return limit_.load(std::memory_order_relaxed); }
  // A new limit (> 0), compared against the last sample at once.
  void set_limit_bytes(int64_t limit);

 private:
  void Sample();
  void Run();

  const absl::Duration interval_;
  const Reader read_;
  std::atomic<int64_t> limit_;
  std::atomic<int64_t> resident_{0};
  std::atomic<bool> over_{false};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata
