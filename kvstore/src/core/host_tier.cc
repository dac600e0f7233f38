// G2: the host tier (see host_tier.h for the contract).
//
// Slot life cycle:   kFree -> kWriting (Put copying, or a commit verifying) -> kStored
//                    kFree -> kReserved (a peer writing) -> kWriting -> kStored | kFree
//                    kStored -> kFree (evicted/erased/corrupt, no pins)
//                    kStored -> kDetached (erased/corrupt while pinned) -> kFree (last unpin)
// A stored slot is pinned by leases (external readers) and by `readers` (Get copying outside
// the lock); a pinned slot is never evicted or reused.
#include "strata/kvstore/host_tier.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "host_tier_internal.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/eviction_policy.h"

namespace strata::kvstore {
namespace {

using internal::HostPool;

enum class SlotState : uint8_t { kFree, kWriting, kReserved, kStored, kDetached };

struct Slot {
  BlockMeta meta;
  uint64_t checksum = 0;
  SlotState state = SlotState::kFree;
  int32_t readers = 0;  // Get copies in flight
  int32_t leases = 0;   // outstanding Acquire leases
};

class HostTierImpl final : public HostTier {
 public:
  HostTierImpl(const HostTierOptions& options, HostPool pool, int32_t num_slots,
               std::unique_ptr<EvictionPolicy> policy)
      : kind_(options.kind),
        block_bytes_(options.block_bytes),
        lease_timeout_(options.lease_timeout),
        pool_(std::move(pool)),
        num_slots_(num_slots),
        slots_(num_slots),
        policy_(std::move(policy)) {
    free_.reserve(num_slots);
    for (int32_t i = num_slots - 1; i >= 0; --i) free_.push_back(i);  // slot 0 first
  }

  TierKind kind() const override { return kind_; }
  size_t block_bytes() const override { return block_bytes_; }
  bool pinned() const override { return pool_.pinned(); }
  void* pool_base() const override { return pool_.base(); }
  size_t pool_bytes() const override { return static_cast<size_t>(num_slots_) * block_bytes_; }

  absl::Status Put(const BlockMeta& meta, std::span<const std::byte> data) override;
  absl::Status Get(BlockHash hash, std::span<std::byte> dst) override;
  bool Contains(BlockHash hash) const override;
  absl::Status Erase(BlockHash hash) override;
  std::vector<BlockMeta> Contents() const override;
  TierUsage usage() const override;
  TierStats stats() const override;
  void SetEventListener(TierEventListener listener) override;

  absl::StatusOr<Lease> Acquire(BlockHash hash) override;
  absl::StatusOr<uint64_t> Pin(BlockHash hash) override;
  void Release(uint64_t lease_id) override;
  absl::StatusOr<Reservation> ReserveWrite(const BlockMeta& meta) override;
  absl::Status CommitWrite(uint64_t reservation_id, uint64_t checksum) override {
    return Commit(reservation_id, checksum, CommitMode::kVerify);
  }
  absl::Status CommitWriteUnverified(uint64_t reservation_id, uint64_t checksum) override {
    return Commit(reservation_id, checksum, CommitMode::kTrust);
  }
  absl::Status CommitLocalWrite(uint64_t reservation_id) override {
    return Commit(reservation_id, 0, CommitMode::kCompute);
  }
  void AbortWrite(uint64_t reservation_id) override;
  int64_t expired_leases() const override;
  void SetEvictionHook(EvictionHook hook) override;

 private:
  struct LeaseInfo {
    int32_t slot;
    absl::Time deadline;
  };
  struct ReservationInfo {
    int32_t slot;
    BlockMeta meta;
    absl::Time deadline;
  };

  std::byte* SlotData(int32_t slot) const {
    return pool_.base() + static_cast<size_t>(slot) * block_bytes_;
  }
  std::span<std::byte> SlotSpan(int32_t slot) const { return {SlotData(slot), block_bytes_}; }
  size_t SlotOffset(int32_t slot) const { return static_cast<size_t>(slot) * block_bytes_; }

  // kVerify: the slot must match `checksum`; kTrust: publish with `checksum`; kCompute: publish
  // with the checksum of the slot's bytes.
  enum class CommitMode { kVerify, kTrust, kCompute };
  absl::Status Commit(uint64_t reservation_id, uint64_t checksum, CommitMode mode);
  absl::StatusOr<int32_t> AllocateSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReclaimExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeSlotLocked(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFreeDetachedLocked(int32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked(int32_t slot, const BlockMeta& meta, uint64_t checksum)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(TierEvent::Kind kind, const BlockMeta& meta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NewDeadlineLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TierKind kind_;
  const size_t block_bytes_;
  const absl::Duration lease_timeout_;
  const HostPool pool_;
  const int32_t num_slots_;

  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<BlockHash, int32_t> index_ ABSL_GUARDED_BY(mu_);  // stored blocks
  std::unique_ptr<EvictionPolicy> policy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, LeaseInfo> leases_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, ReservationInfo> reservations_ ABSL_GUARDED_BY(mu_);
  absl::Time next_expiry_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  TierStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t expired_ ABSL_GUARDED_BY(mu_) = 0;
  TierEventListener listener_ ABSL_GUARDED_BY(mu_);
  EvictionHook eviction_hook_ ABSL_GUARDED_BY(mu_);
};

// ---- data path -------------------------------------------------------------------------------

absl::Status HostTierImpl::Put(const BlockMeta& meta, std::span<const std::byte> data) {
  if (data.size() != block_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("host tier: block of ", data.size(), " bytes, expected ", block_bytes_));
  }
  int32_t slot;
  {
    absl::MutexLock lock(&mu_);
    if (index_.contains(meta.hash)) {
      policy_->Touch(meta.hash);
      return absl::OkStatus();
    }
    absl::StatusOr<int32_t> allocated = AllocateSlotLocked();
    if (!allocated.ok()) {
      ++stats_.rejected;
      return allocated.status();
    }
    slot = *allocated;
    slots_[slot].state = SlotState::kWriting;
  }
  const uint64_t checksum = CopyWithBlockChecksum(SlotSpan(slot), data, CopyDestination::kStreamed);
  absl::MutexLock lock(&mu_);
  PublishLocked(slot, meta, checksum);
  return absl::OkStatus();
}

absl::Status HostTierImpl::Get(BlockHash hash, std::span<std::byte> dst) {
  if (dst.size() != block_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("host tier: buffer of ", dst.size(), " bytes, expected ", block_bytes_));
  }
  int32_t slot;
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(hash);
    if (it == index_.end()) {
      ++stats_.misses;
      return absl::NotFoundError("host tier: block not present");
    }
    slot = it->second;
    ++slots_[slot].readers;
    policy_->Touch(hash);
  }
  const uint64_t checksum = CopyWithBlockChecksum(dst, SlotSpan(slot));
  absl::MutexLock lock(&mu_);
  Slot& s = slots_[slot];
  --s.readers;
  if (checksum != s.checksum) {
    ++stats_.checksum_failures;
    ++stats_.misses;
    if (s.state == SlotState::kStored) RemoveLocked(slot);
    MaybeFreeDetachedLocked(slot);
    return absl::DataLossError(absl::StrCat("host tier: checksum mismatch for block ", hash));
  }
  ++stats_.hits;
  stats_.bytes_out += static_cast<int64_t>(block_bytes_);
  MaybeFreeDetachedLocked(slot);
  return absl::OkStatus();
}

bool HostTierImpl::Contains(BlockHash hash) const {
  absl::ReaderMutexLock lock(&mu_);
  return index_.contains(hash);
}

absl::Status HostTierImpl::Erase(BlockHash hash) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(hash);
  if (it != index_.end()) RemoveLocked(it->second);
  return absl::OkStatus();
}

std::vector<BlockMeta> HostTierImpl::Contents() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<BlockMeta> out;
  out.reserve(index_.size());
  for (const auto& [hash, slot] : index_) out.push_back(slots_[slot].meta);
  return out;
}

TierUsage HostTierImpl::usage() const {
  absl::ReaderMutexLock lock(&mu_);
  const auto blocks = static_cast<int64_t>(index_.size());
  return TierUsage{.blocks = blocks,
                   .bytes = blocks * static_cast<int64_t>(block_bytes_),
                   .capacity_bytes = static_cast<int64_t>(pool_bytes())};
}

TierStats HostTierImpl::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  return stats_;
}

void HostTierImpl::SetEventListener(TierEventListener listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

void HostTierImpl::SetEvictionHook(EvictionHook hook) {
  absl::MutexLock lock(&mu_);
  eviction_hook_ = std::move(hook);
}

int64_t HostTierImpl::expired_leases() const {
  absl::ReaderMutexLock lock(&mu_);
  return expired_;
}

// ---- leases and direct writes ----------------------------------------------------------------

absl::StatusOr<HostTier::Lease> HostTierImpl::Acquire(BlockHash hash) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) {
    ++stats_.misses;
    return absl::NotFoundError("host tier: block not present");
  }
  const int32_t slot = it->second;
  const uint64_t id = next_id_++;
  leases_.emplace(id, LeaseInfo{.slot = slot, .deadline = NewDeadlineLocked()});
  ++slots_[slot].leases;
  policy_->Touch(hash);
  ++stats_.hits;
  stats_.bytes_out += static_cast<int64_t>(block_bytes_);
  return Lease{.id = id, .offset = SlotOffset(slot), .checksum = slots_[slot].checksum};
}

absl::StatusOr<uint64_t> HostTierImpl::Pin(BlockHash hash) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) return absl::NotFoundError("host tier: block not present");
  const uint64_t id = next_id_++;
  leases_.emplace(id, LeaseInfo{.slot = it->second, .deadline = NewDeadlineLocked()});
  ++slots_[it->second].leases;
  policy_->Touch(hash);
  return id;
}

void HostTierImpl::Release(uint64_t lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  const int32_t slot = it->second.slot;
  leases_.erase(it);
  --slots_[slot].leases;
  MaybeFreeDetachedLocked(slot);
}

absl::StatusOr<HostTier::Reservation> HostTierImpl::ReserveWrite(const BlockMeta& meta) {
  absl::MutexLock lock(&mu_);
  if (index_.contains(meta.hash)) {
    return absl::AlreadyExistsError("host tier: block already present");
  }
  absl::StatusOr<int32_t> slot = AllocateSlotLocked();
  if (!slot.ok()) {
    ++stats_.rejected;
    return slot.status();
  }
  slots_[*slot].state = SlotState::kReserved;
  const uint64_t id = next_id_++;
  reservations_.emplace(
      id, ReservationInfo{.slot = *slot, .meta = meta, .deadline = NewDeadlineLocked()});
  return Reservation{.id = id, .offset = SlotOffset(*slot)};
}

absl::Status HostTierImpl::Commit(uint64_t reservation_id, uint64_t checksum, CommitMode mode) {
  ReservationInfo res;
  {
    absl::MutexLock lock(&mu_);
    auto it = reservations_.find(reservation_id);
    if (it == reservations_.end()) {
      return absl::NotFoundError("host tier: unknown or expired reservation");
    }
    res = it->second;
    reservations_.erase(it);
    if (mode == CommitMode::kTrust) {
      PublishLocked(res.slot, res.meta, checksum);
      return absl::OkStatus();
    }
    slots_[res.slot].state = SlotState::kWriting;  // no longer expirable
  }
  const uint64_t actual = BlockChecksum(SlotSpan(res.slot));
  absl::MutexLock lock(&mu_);
  if (mode == CommitMode::kVerify && actual != checksum) {
    ++stats_.checksum_failures;
    FreeSlotLocked(res.slot);
    return absl::DataLossError(
        absl::StrCat("host tier: written block ", res.meta.hash, " does not match its checksum"));
  }
  PublishLocked(res.slot, res.meta, actual);
  return absl::OkStatus();
}

void HostTierImpl::AbortWrite(uint64_t reservation_id) {
  absl::MutexLock lock(&mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return;
  FreeSlotLocked(it->second.slot);
  reservations_.erase(it);
}

// ---- slot management (lock held) -------------------------------------------------------------

absl::Time HostTierImpl::NewDeadlineLocked() {
  const absl::Time deadline = absl::Now() + lease_timeout_;
  next_expiry_ = std::min(next_expiry_, deadline);
  return deadline;
}

// A free slot, else one reclaimed from expired reservations, else the policy's victim among
// unpinned blocks (evicted through the hook).
absl::StatusOr<int32_t> HostTierImpl::AllocateSlotLocked() {
  if (free_.empty()) ReclaimExpiredLocked(absl::Now());
  if (free_.empty()) {
    std::optional<BlockHash> victim = policy_->Victim([this](BlockHash h) {
      mu_.AssertHeld();
      const Slot& s = slots_[index_.find(h)->second];
      return s.leases == 0 && s.readers == 0;
    });
    if (!victim) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host tier: no slot can be freed (all ", num_slots_, " leased or in use)"));
    }
    EvictLocked(index_.find(*victim)->second);
  }
  STRATA_CHECK(!free_.empty()) << "host tier: eviction freed no slot";
  const int32_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void HostTierImpl::ReclaimExpiredLocked(absl::Time now) {
  if (now < next_expiry_) return;
  next_expiry_ = absl::InfiniteFuture();
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline > now) {
      next_expiry_ = std::min(next_expiry_, it->second.deadline);
      ++it;
      continue;
    }
    const int32_t slot = it->second.slot;
    leases_.erase(it++);
    --slots_[slot].leases;
    ++expired_;
    MaybeFreeDetachedLocked(slot);
  }
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (it->second.deadline > now) {
      next_expiry_ = std::min(next_expiry_, it->second.deadline);
      ++it;
      continue;
    }
    FreeSlotLocked(it->second.slot);
    reservations_.erase(it++);
    ++expired_;
  }
}

void HostTierImpl::EvictLocked(int32_t slot) {
  if (eviction_hook_ && !eviction_hook_(slots_[slot].meta, SlotSpan(slot), slots_[slot].checksum)) {
    ++stats_.checksum_failures;
  }
  ++stats_.evictions;
  RemoveLocked(slot);
}

// Takes a stored block out of the index and the policy (kRemoved event); the slot is freed now
// or, if pinned, when its last pin goes.
void HostTierImpl::RemoveLocked(int32_t slot) {
  Slot& s = slots_[slot];
  policy_->Erase(s.meta.hash);
  index_.erase(s.meta.hash);
  EmitLocked(TierEvent::Kind::kRemoved, s.meta);
  s.state = SlotState::kDetached;
  MaybeFreeDetachedLocked(slot);
}

void HostTierImpl::MaybeFreeDetachedLocked(int32_t slot) {
  const Slot& s = slots_[slot];
  if (s.state == SlotState::kDetached && s.leases == 0 && s.readers == 0) FreeSlotLocked(slot);
}

void HostTierImpl::FreeSlotLocked(int32_t slot) {
  slots_[slot] = Slot{};
  free_.push_back(slot);
}

// Makes a written slot the block's copy, or gives it back if another writer got there first.
void HostTierImpl::PublishLocked(int32_t slot, const BlockMeta& meta, uint64_t checksum) {
  if (index_.contains(meta.hash)) {
    FreeSlotLocked(slot);
    policy_->Touch(meta.hash);
    return;
  }
  Slot& s = slots_[slot];
  s.meta = meta;
  s.checksum = checksum;
  s.state = SlotState::kStored;
  index_.emplace(meta.hash, slot);
  policy_->Insert(meta.hash);
  ++stats_.puts;
  stats_.bytes_in += static_cast<int64_t>(block_bytes_);
  EmitLocked(TierEvent::Kind::kStored, meta);
}

void HostTierImpl::EmitLocked(TierEvent::Kind kind, const BlockMeta& meta) {
  if (!listener_) return;
  listener_(TierEvent{.kind = kind,
                      .tier = kind_,
                      .hash = meta.hash,
                      .parent = kind == TierEvent::Kind::kStored ? meta.parent : kRootBlockHash});
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(const HostTierOptions& options) {
  if (options.block_bytes == 0) return absl::InvalidArgumentError("host tier: block_bytes is 0");
  if (options.capacity_bytes < static_cast<int64_t>(options.block_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("host tier: capacity ", options.capacity_bytes,
                                                   " bytes holds no ", options.block_bytes,
                                                   "-byte block"));
  }
  const int64_t slots = options.capacity_bytes / static_cast<int64_t>(options.block_bytes);
  if (slots > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("host tier: capacity ", options.capacity_bytes,
                                                   " bytes makes ", slots, " slots of ",
                                                   options.block_bytes, " bytes, more than 2^31"));
  }
  if (options.kind != TierKind::kHost && options.kind != TierKind::kRemote) {
    return absl::InvalidArgumentError("host tier: kind must be host or remote");
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy,
                          CreateEvictionPolicy(options.policy, slots));
  STRATA_ASSIGN_OR_RETURN(
      HostPool pool,
      HostPool::Create(static_cast<size_t>(slots) * options.block_bytes, options.allocate));
  return std::make_unique<HostTierImpl>(options, std::move(pool), static_cast<int32_t>(slots),
                                        std::move(policy));
}

}  // namespace strata::kvstore
