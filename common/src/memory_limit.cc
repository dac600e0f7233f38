#include "strata/common/memory_limit.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "strata/common/file_util.h"

namespace strata {

absl::StatusOr<int64_t> ReadResidentBytes() {
  // One small read of a fixed file: cheap enough for a sampler, no allocation.
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("/proc/self/statm: ", std::strerror(errno)));
  }
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return absl::InternalError("/proc/self/statm: empty read");
  buf[n] = '\0';
  // "size resident shared text lib data dt", in pages.
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(buf, size_t(n)), ' ', absl::SkipEmpty());
  int64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &pages) || pages < 0) {
    return absl::InternalError("/proc/self/statm: unexpected contents");
  }
  return pages * int64_t(sysconf(_SC_PAGESIZE));
}

std::optional<int64_t> CgroupMemoryMax(const std::string& proc_cgroup,
                                       const std::string& cgroup_root) {
  // The cgroup v2 line is "0::/path"; v1 lines carry a controller list between the colons.
  for (absl::string_view line : absl::StrSplit(proc_cgroup, '\n', absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&line, "0::")) continue;
    std::string path(absl::StripAsciiWhitespace(line));
    // A path that climbs out of the cgroup tree is not read.
    if (path.empty() || path[0] != '/' || absl::StrContains(path, "..")) return std::nullopt;
    auto text = ReadFileToString(absl::StrCat(cgroup_root, path == "/" ? "" : path,
                                              "/memory.max"));
    if (!text.ok()) return std::nullopt;
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &bytes) || bytes <= 0) {
      return std::nullopt;  // "max", or nothing usable
    }
    return bytes;
  }
  return std::nullopt;
}

std::optional<int64_t> ThisCgroupMemoryMax() {
  auto text = ReadFileToString("/proc/self/cgroup");
  if (!text.ok()) return std::nullopt;
  return CgroupMemoryMax(*text, "/sys/fs/cgroup");
}

absl::StatusOr<int64_t> ResolveMemoryLimit(int64_t flag_mb, std::optional<int64_t> cgroup_max) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (flag_mb > 0) {
    if (flag_mb > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError("--max-memory-mb is too large");
    }
    return flag_mb * kMiB;
  }
  if (flag_mb == 0) return 0;
  if (flag_mb != -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-memory-mb must be a number of MiB, 0 (off) or -1 (auto), got ",
                     flag_mb));
  }
  if (!cgroup_max.has_value()) return 0;
  const int64_t headroom = std::max<int64_t>(*cgroup_max / 10, 64 * kMiB);
  // A cgroup too small for the headroom: the limit would refuse everything, so none.
  return *cgroup_max > headroom ? *cgroup_max - headroom : 0;
}

MemoryWatch::MemoryWatch(int64_t limit_bytes, absl::Duration interval, Reader read)
    : interval_(interval), read_(std::move(read)), limit_(limit_bytes) {
  Sample();
  thread_ = std::thread([this] { Run(); });
}

MemoryWatch::~MemoryWatch() {
  stop_.Notify();
  thread_.join();
}

void MemoryWatch::set_limit_bytes(int64_t limit) {
  limit_.store(limit, std::memory_order_relaxed);
  over_.store(resident_.load(std::memory_order_relaxed) > limit, std::memory_order_relaxed);
}

void MemoryWatch::Sample() {
  auto bytes = read_();
  if (!bytes.ok()) return;
  resident_.store(*bytes, std::memory_order_relaxed);
  over_.store(*bytes > limit_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void MemoryWatch::Run() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) Sample();
}

}  // namespace strata
