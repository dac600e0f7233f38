// Memory a pool can take on this host: the room left under the machine's and the cgroups'
// limits, and faulting a pool's pages in ahead of use.
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it (the kernel then says EINVAL)
#endif

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "strata/common/file_util.h"
#include "strata/kvstore/host_memory.h"

namespace strata::kvstore {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;

// A byte count from a cgroup file; -1 for "max", absent files and v1's "no limit" (a page-rounded
// INT64_MAX, anything from 2^60 up here).
int64_t CgroupBytes(const std::string& path) {
  const absl::StatusOr<std::string> text = ReadFileToString(path);
  int64_t v = -1;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v) || v < 0 ||
      v >= (int64_t{1} << 60)) {
    return -1;
  }
  return v;
}

// The page cache of file data in a cgroup's memory.stat: the sum of the keys named (v2
// "active_file" / "inactive_file", v1 "total_active_file" / "total_inactive_file"); 0 if absent.
// The kernel reclaims it before it OOM-kills, so it is room too (as Kubernetes' working set
// leaves out inactive_file). Shared memory and tmpfs pages are not in it: they sit on the
// anonymous lists.
int64_t FileCacheBytes(const std::string& path, const char* active, const char* inactive) {
  std::ifstream in(path);
  std::string key;
  int64_t value = 0, sum = 0;
  while (in >> key >> value) {
    if (key == active || key == inactive) sum += std::max<int64_t>(value, 0);
  }
  return sum;
}

struct CgroupFiles {
  const char* limit;
  const char* usage;
  const char* active_file;
  const char* inactive_file;
};
constexpr CgroupFiles kV2 = {"memory.max", "memory.current", "active_file", "inactive_file"};
constexpr CgroupFiles kV1 = {"memory.limit_in_bytes", "memory.usage_in_bytes", "total_active_file",
                             "total_inactive_file"};

// Walks from `dir` up to `root` (both included), keeping the least limit - (usage - file cache).
void LeastRoom(const std::string& root, std::string dir, const CgroupFiles& files,
               MemoryRoom* room) {
  while (true) {
    const int64_t limit = CgroupBytes(dir + "/" + files.limit);
    const int64_t usage = CgroupBytes(dir + "/" + files.usage);
    if (limit >= 0 && usage >= 0) {
      const int64_t cache =
          FileCacheBytes(dir + "/memory.stat", files.active_file, files.inactive_file);
      const int64_t left = std::max<int64_t>(limit - std::max<int64_t>(usage - cache, 0), 0);
      if (room->cgroup_room < 0 || left < room->cgroup_room) {
        room->cgroup_room = left;
        room->cgroup = dir;
      }
    }
    if (dir.size() <= root.size()) return;
    dir.resize(std::max(dir.rfind('/'), root.size()));
  }
}

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / double(int64_t{1} << 30));
}

}  // namespace

MemoryRoom ReadMemoryRoom(absl::string_view proc_root, absl::string_view cgroup_root) {
  MemoryRoom room;
  {
    std::ifstream in(absl::StrCat(proc_root, "/meminfo"));
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view rest = line;
      if (!absl::ConsumePrefix(&rest, "MemAvailable:")) continue;
      rest = absl::StripAsciiWhitespace(rest);
      int64_t kib = 0;
      if (absl::ConsumeSuffix(&rest, "kB") &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib) && kib >= 0) {
        room.available = kib * 1024;
      }
      break;
    }
  }
  // "0::/path" for cgroup v2; "N:controllers:/path" for v1, whose memory controller is mounted
  // at <root>/memory.
  std::ifstream in(absl::StrCat(proc_root, "/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    std::string path = parts[2] == "/" ? "" : parts[2];
    if (parts[0] == "0" && parts[1].empty()) {
      const std::string root(cgroup_root);
      LeastRoom(root, root + path, kV2, &room);
    } else {
      const std::vector<absl::string_view> controllers = absl::StrSplit(parts[1], ',');
      if (std::find(controllers.begin(), controllers.end(), "memory") == controllers.end()) {
        continue;
      }
      const std::string root = absl::StrCat(cgroup_root, "/memory");
      LeastRoom(root, root + path, kV1, &room);
    }
  }
  return room;
}

absl::Status CheckMemoryFits(size_t bytes, absl::string_view what, const MemoryRoom& room) {
  const int64_t need =
      static_cast<int64_t>(std::min<size_t>(bytes, std::numeric_limits<int64_t>::max()));
  if (room.cgroup_room >= 0 && need > room.cgroup_room &&
      (room.available < 0 || room.cgroup_room <= room.available)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", GiB(need), " does not fit in memory: the cgroup ", room.cgroup,
                     " has ", GiB(room.cgroup_room), " left under its limit"));
  }
  if (room.available >= 0 && need > room.available) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " of ", GiB(need),
                                                     " does not fit in memory: this machine has ",
                                                     GiB(room.available), " available"));
  }
  return absl::OkStatus();
}

// The kernel's MADV_POPULATE_WRITE (Linux 5.14) over slices on a few threads (the pages are
// zeroed as they are faulted, which is the whole cost: 0.43 s per GiB with MAP_POPULATE's 4 KiB
// pages on an H200 host, docs/BENCHMARKS.md), or one write per page where the kernel lacks it
// (or refuses the range).
void PopulatePages(std::byte* p, size_t bytes) {
  constexpr size_t kMinSlice = size_t{256} << 20;
  const size_t threads = std::clamp<size_t>(
      std::min<size_t>(std::thread::hardware_concurrency(), bytes / kMinSlice), 1, 8);
  const size_t slice = (bytes / threads + kHugePage - 1) / kHugePage * kHugePage;
  auto populate = [&](size_t begin) {
    const size_t len = std::min(slice, bytes - begin);
    if (madvise(p + begin, len, MADV_POPULATE_WRITE) == 0) return;
    volatile std::byte* v = p + begin;
    for (size_t i = 0; i < len; i += kPage) v[i] = v[i];  // a write fault, contents kept
  };
  std::vector<std::thread> workers;
  for (size_t begin = slice; begin < bytes; begin += slice) {
    try {
      workers.emplace_back(populate, begin);
    } catch (const std::system_error&) {  // no thread to be had: this one does the slice
      populate(begin);
    }
  }
  populate(0);
  for (std::thread& t : workers) t.join();
}

}  // namespace strata::kvstore
