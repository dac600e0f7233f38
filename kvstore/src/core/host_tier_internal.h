#pragma once
// Pieces of the G2 host tier shared by its implementation files (and benchmarked/tested).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "strata/kvstore/host_memory.h"

namespace strata::kvstore::internal {

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
