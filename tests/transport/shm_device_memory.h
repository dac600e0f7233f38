#pragma once
// A DeviceMemory over shared memory, for testing the transport's device path without a GPU:
// "device" allocations are memfd mappings, a handle names the fd through /proc/<pid>/fd (any
// process of the same user on this host can open it, at a different address), and Copy is a
// memcpy per run. It counts opens and closes, and can be told to fail copies.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "strata/transport/agent.h"
#include "strata/transport/device_memory.h"

namespace strata::transport::testing {

class ShmDeviceMemory final : public DeviceMemory {
 public:
  ~ShmDeviceMemory() override {
    for (auto& [base, a] : allocations_) {
      munmap(base, a.length);
      close(a.fd);
    }
  }

  // A zero-filled "device" allocation of `length` bytes, freed with the object.
  void* Allocate(size_t length) {
    int fd = memfd_create("strata-test-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(length)) != 0) return nullptr;
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    allocations_[p] = {fd, length};
    return p;
  }

  std::string Describe() const override { return "shm"; }

  absl::StatusOr<std::string> Export(void* base) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(base);
    if (it == allocations_.end()) {
      return absl::InvalidArgumentError("not the base of an allocation of this DeviceMemory");
    }
    return absl::StrCat("/proc/", getpid(), "/fd/", it->second.fd, ":", it->second.length);
  }

  absl::StatusOr<void*> Open(std::string_view handle) override {
    if (refuse_open) return absl::UnimplementedError("this test device cannot open handles");
    std::vector<std::string> parts = absl::StrSplit(absl::string_view(handle.data(), handle.size()), ':');
    size_t length = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &length)) {
      return absl::InvalidArgumentError("malformed handle");
    }
    int fd = open(parts[0].c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", parts[0]));
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return absl::InternalError("mmap failed");
    std::lock_guard<std::mutex> lock(mu_);
    opened_[p] = length;
    ++opens;
    return p;
  }

  void Close(void* mapped) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = opened_.find(mapped);
    if (it == opened_.end()) return;
    munmap(mapped, it->second);
    opened_.erase(it);
    ++closes;
  }

  absl::Status RegisterHost(void* ptr, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!registered_.emplace(ptr, bytes).second) {
      return absl::InvalidArgumentError("host range registered twice");
    }
    return absl::OkStatus();
  }
  void UnregisterHost(void* ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    registered_.erase(ptr);
  }
  size_t host_registered() {
    std::lock_guard<std::mutex> lock(mu_);
    return registered_.size();
  }

  absl::Status Copy(void* dst, const void* src, std::span<const CopyRun> runs) override {
    if (fail_copies) return absl::InternalError("injected copy failure");
    if (copy_delay_ms > 0) usleep(copy_delay_ms * 1000);
    for (const CopyRun& r : runs) {
      std::memcpy(static_cast<char*>(dst) + r.dst_offset,
                  static_cast<const char*>(src) + r.src_offset, r.length);
    }
    ++copies;
    return absl::OkStatus();
  }

  std::atomic<int> opens{0}, closes{0}, copies{0};
  std::atomic<bool> fail_copies{false}, refuse_open{false};
  std::atomic<int> copy_delay_ms{0};

 private:
  struct Allocation {
    int fd;
    size_t length;
  };
  std::mutex mu_;
  std::map<void*, Allocation> allocations_;
  std::map<void*, size_t> opened_;
  std::map<void*, size_t> registered_;
};

// Options of an agent on the staged path over `device`: pieces of `piece_bytes`, two slots (so
// that every write of a few pieces exercises slot reuse).
inline AgentOptions StagedOptions(const char* name, DeviceMemory* device, size_t piece_bytes) {
  AgentOptions o;
  o.name = name;
  o.device = device;
  o.device_path = AgentOptions::DevicePath::kStaged;
  o.staging_piece_bytes = piece_bytes;
  o.staging_slots = 2;
  return o;
}

}  // namespace strata::transport::testing
