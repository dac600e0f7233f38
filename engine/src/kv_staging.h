#pragma once
// Host staging for the engine's KV block copies to and from the lower tiers: `slots` buffers
// of `slot_bytes`, page-locked through the backend when its plugin can (host_register), so
// copy_d2h / copy_h2d on them run asynchronously on the stream.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "strata/plugin/plugin.h"

namespace strata {

class KvStaging {
 public:
  // ResourceExhausted when the host memory cannot be allocated; staying pageable (the plugin
  // has no host_register, or it fails) is not an error.
  static absl::StatusOr<std::unique_ptr<KvStaging>> Create(Backend* backend, size_t slot_bytes,
                                                           size_t slots);
  ~KvStaging();
  KvStaging(const KvStaging&) = delete;
  KvStaging& operator=(const KvStaging&) = delete;

  size_t slots() const { return slots_; }
  bool page_locked() const { return registered_; }
  std::span<std::byte> slot(size_t i) {
    return std::span<std::byte>(memory_.get() + i * slot_bytes_, slot_bytes_);
  }

 private:
  KvStaging(Backend* backend, size_t slot_bytes, size_t slots)
      : backend_(backend), slot_bytes_(slot_bytes), slots_(slots) {}
  Backend* backend_;
  size_t slot_bytes_;
  size_t slots_;
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> memory_;
  bool registered_ = false;
};

}  // namespace strata
