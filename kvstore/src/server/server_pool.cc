// The kvstore daemon's block pool and its event log (server_internal.h).

#include "absl/strings/str_cat.h"
#include "server_internal.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/host_memory.h"

namespace strata::kvstore::server {

void EventLog::OnEvent(const TierEvent& e) {
  v1::KvEvent m;
  m.set_kind(e.kind == TierEvent::Kind::kStored ? v1::KvEvent::STORED : v1::KvEvent::REMOVED);
  m.set_hash(e.hash);
  m.set_parent_hash(e.kind == TierEvent::Kind::kStored ? e.parent : 0);
  m.set_tier(static_cast<uint32_t>(TierKind::kRemote));
  absl::MutexLock lock(&mu_);
  if (e.kind == TierEvent::Kind::kStored) {
    held_[e.hash] = e.parent;
  } else {
    held_.erase(e.hash);
  }
  if (queue_.size() >= kMaxQueued) {
    overflowed_ = true;  // the next Take resends the whole held set instead
    return;
  }
  queue_.push_back(std::move(m));
}

std::vector<v1::KvEvent> EventLog::Take() {
  absl::MutexLock lock(&mu_);
  if (overflowed_) {
    // Events were dropped: a full picture, led by CLEARED, replaces the ones that remain, so
    // the routers drop what was removed meanwhile.
    overflowed_ = false;
    queue_.clear();
    v1::KvEvent cleared;
    cleared.set_kind(v1::KvEvent::CLEARED);
    cleared.set_tier(static_cast<uint32_t>(TierKind::kRemote));
    queue_.push_back(std::move(cleared));
    for (const auto& [hash, parent] : held_) {
      v1::KvEvent m;
      m.set_kind(v1::KvEvent::STORED);
      m.set_hash(hash);
      m.set_parent_hash(parent);
      m.set_tier(static_cast<uint32_t>(TierKind::kRemote));
      queue_.push_back(std::move(m));
    }
  }
  std::vector<v1::KvEvent> out;
  out.swap(queue_);
  return out;
}

void EventLog::Resync() {
  absl::MutexLock lock(&mu_);
  overflowed_ = true;  // Take() rebuilds the queue from the held set
}

absl::Status Pool::Reserve() {
  absl::MutexLock lock(&mu_);
  return ReserveLocked();
}

absl::Status Pool::ReserveLocked() {
  if (memory_.addr != nullptr) return absl::OkStatus();
  // Refused here rather than OOM-killed while faulting in; a transport that falls back to a
  // file in /dev/shm would also leave that file behind, filling the tmpfs for everyone.
  STRATA_RETURN_IF_ERROR(kvstore::CheckMemoryFits(static_cast<size_t>(options_.capacity_bytes),
                                                   absl::StrCat("kvstore ", options_.id, " pool")));
  STRATA_ASSIGN_OR_RETURN(memory_,
                          agent_->AllocateMemory(static_cast<size_t>(options_.capacity_bytes)));
  // Fault the pool in now, as the host tier does with its own memory: otherwise the first
  // commit into every page pays page faults inside a client's put (perf showed them next to
  // the checksum in the daemon's profile).
  kvstore::PopulatePages(static_cast<std::byte*>(memory_.addr), memory_.length);
  return absl::OkStatus();
}

absl::StatusOr<HostTier*> Pool::Ensure(size_t block_bytes) {
  absl::MutexLock lock(&mu_);
  if (tier_ != nullptr) {
    if (block_bytes != 0 && block_bytes != tier_->block_bytes()) {
      return absl::FailedPreconditionError(
          absl::StrCat("kvstore ", options_.id, " holds blocks of ", tier_->block_bytes(),
                       " bytes, not ", block_bytes));
    }
    return tier_.get();
  }
  if (block_bytes == 0) {
    return absl::FailedPreconditionError(
        "the block size is not known yet: the first Hello must name it");
  }
  STRATA_RETURN_IF_ERROR(ReserveLocked());
  HostTierOptions o;
  o.block_bytes = block_bytes;
  o.capacity_bytes = options_.capacity_bytes;
  o.policy = options_.policy;
  o.lease_timeout = options_.lease_timeout;
  o.kind = TierKind::kRemote;
  // The agent's memory: a client on this host maps it and copies straight into slots. The
  // slots (capacity rounded down to whole blocks) always fit in it.
  o.allocate = [memory = memory_](size_t bytes) -> absl::StatusOr<void*> {
    if (bytes > memory.length) {
      return absl::InternalError(
          absl::StrCat("kvstore pool of ", memory.length, " bytes cannot hold ", bytes));
    }
    return memory.addr;
  };
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<HostTier> tier, HostTier::Create(o));
  STRATA_ASSIGN_OR_RETURN(region_blob_, agent_->ExportRegion(memory_.region));
  tier->SetEventListener([events = events_](const TierEvent& e) { events->OnEvent(e); });
  tier_ = std::move(tier);
  tier_ptr_.store(tier_.get(), std::memory_order_release);
  return tier_.get();
}

}  // namespace strata::kvstore::server
