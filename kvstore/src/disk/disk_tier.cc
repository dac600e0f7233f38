// G3 disk tier, the data path (disk_tier.h): blocks in slots of an O_DIRECT data file, their
// index entries in RocksDB. Opening and index rebuild: disk_tier_open.cc.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "disk_tier_impl.h"
#include "strata/common/status_macros.h"

namespace strata::kvstore::disk_internal {
namespace {

rocksdb::Slice KeySlice(const Key& key) { return rocksdb::Slice(key.data(), key.size()); }

// Read staging: up to 8 concurrent Gets, in at most 16 MiB (one huge page of 256 KiB blocks).
constexpr size_t kReadStagingBytes = size_t{16} << 20;
constexpr size_t kMaxReadStagingBuffers = 8;
constexpr size_t kMaxPooledReadBuffers = 8;

size_t ReadStagingBuffers(size_t slot_bytes) {
  return std::clamp<size_t>(kReadStagingBytes / slot_bytes, 1, kMaxReadStagingBuffers);
}

}  // namespace

bool DiskTierImpl::ZeroCopy(const void* data) const {
  // Buffered I/O takes any buffer; O_DIRECT needs aligned addresses and lengths.
  return !file_->direct_io() || (IsAligned(data) && options_.block_bytes % kIoAlign == 0);
}

void DiskTierImpl::EmitLocked(TierEvent::Kind kind, BlockHash hash, BlockHash parent) {
  if (!listener_) return;
  TierEvent event;
  event.kind = kind;
  event.tier = TierKind::kDisk;
  event.hash = hash;
  event.parent = kind == TierEvent::Kind::kStored ? parent : kRootBlockHash;
  listener_(event);
}

std::optional<DiskTierImpl::Entry> DiskTierImpl::UnindexLocked(BlockHash hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  const Entry e = it->second;
  index_.erase(it);
  policy_->Erase(hash);
  EmitLocked(TierEvent::Kind::kRemoved, hash, kRootBlockHash);
  return e;
}

absl::StatusOr<std::vector<DiskTierImpl::Victim>> DiskTierImpl::PickVictimsLocked(int64_t extra) {
  std::vector<Victim> victims;
  const int64_t need = static_cast<int64_t>(index_.size()) + extra - capacity_blocks_;
  for (int64_t i = 0; i < need; ++i) {
    // Disk blocks are never leased: the only keys skipped are the ones already chosen.
    std::optional<BlockHash> victim = policy_->Victim([&](BlockHash key) {
      return std::none_of(victims.begin(), victims.end(),
                          [&](const Victim& v) { return v.hash == key; });
    });
    if (!victim.has_value()) {
      return absl::ResourceExhaustedError("disk tier: no block can be evicted");
    }
    victims.push_back({*victim, index_.at(*victim).slot});
  }
  return victims;
}

absl::StatusOr<uint64_t> DiskTierImpl::TakeFreeSlotLocked() {
  if (free_slots_.empty() && !flush_pending_slots_.empty()) {
    STRATA_RETURN_IF_ERROR(FlushIndexLocked());
  }
  if (free_slots_.empty()) {
    // capacity + spare slots and at most capacity blocks: cannot happen.
    return absl::InternalError("disk tier: no free slot");
  }
  const uint64_t slot = free_slots_.front();
  free_slots_.pop_front();
  return slot;
}

void DiskTierImpl::ReleaseSlotLocked(uint64_t slot) {
  if (slot >= static_cast<uint64_t>(total_slots_)) return;  // beyond a shrunk capacity
  if (options_.sync == DiskSyncMode::kNoWal) {
    // The deletion is only in the memtable: a crash would bring the old entry back, pointing
    // at whatever the slot holds by then.
    flush_pending_slots_.push_back(slot);
  } else {
    free_slots_.push_back(slot);
  }
}

absl::Status DiskTierImpl::Put(const BlockMeta& meta, std::span<const std::byte> data) {
  if (data.size() != options_.block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: Put of ", data.size(),
                                                   " bytes, blocks are ", options_.block_bytes));
  }
  {
    absl::MutexLock l(&mu_);
    if (auto it = index_.find(meta.hash); it != index_.end()) {
      policy_->Touch(meta.hash);
      return absl::OkStatus();
    }
  }
  // Written in place when it can be: a Put gains nothing from huge-page staging (measured, see
  // docs/kvstore_disk.md), so only blocks that O_DIRECT cannot take as they are get copied.
  const bool zero_copy = ZeroCopy(data.data());
  // Outside the write lock where possible; a staged block is checksummed while it is copied.
  uint64_t checksum = zero_copy ? BlockChecksum(data) : 0;
  absl::MutexLock w(&write_mu_);
  std::span<const std::byte> payload = data;
  if (!zero_copy) {
    const std::span<std::byte> staging = WriteStagingLocked();
    checksum = CopyWithBlockChecksum(staging.first(data.size()), data);
    payload = staging;  // padded to kIoAlign with zeros
  }
  absl::Status writable = EnsureWritableLocked();
  std::vector<Victim> victims;
  {
    absl::MutexLock l(&mu_);
    if (index_.contains(meta.hash)) {  // stored by another thread meanwhile
      policy_->Touch(meta.hash);
      return absl::OkStatus();
    }
    absl::StatusOr<std::vector<Victim>> picked =
        writable.ok() ? PickVictimsLocked(1) : absl::StatusOr<std::vector<Victim>>(writable);
    if (!picked.ok()) {
      ++stats_.rejected;
      return picked.status();
    }
    victims = *std::move(picked);
  }
  return StoreLocked({meta, options_.block_bytes, checksum, payload}, victims);
}

absl::Status DiskTierImpl::StoreLocked(const SlotWrite& w, const std::vector<Victim>& victims) {
  absl::StatusOr<uint64_t> slot = TakeFreeSlotLocked();
  absl::Status s = slot.status();
  if (s.ok()) {
    // Data first: the slot is free, so no durable index entry points at it while it is torn.
    const std::span<const std::byte> parts[] = {w.payload};
    s = file_->Write(SlotOffset(*slot), parts);
    if (s.ok() && options_.sync == DiskSyncMode::kWalSync) s = file_->Sync();
  }
  if (s.ok()) {
    // Then the index: one atomic batch adds the block and deletes the victims.
    const Key key = EncodeKey(w.meta.hash);
    const auto record =
        EncodeIndexRecord({*slot, w.meta.parent, w.length, w.checksum, next_sequence_});
    rocksdb::WriteBatch batch;
    for (const Victim& v : victims) {
      const Key victim_key = EncodeKey(v.hash);
      batch.Delete(KeySlice(victim_key)).PermitUncheckedError();
    }
    batch.Put(KeySlice(key), rocksdb::Slice(record.data(), record.size())).PermitUncheckedError();
    s = FromRocks(WriteLocked(&batch), "index write");
  }
  // Never reused, even by a failed write: a log record that failed to report success may
  // still be recovered, and then must not tie with the next block's for the same slot.
  const uint64_t sequence = next_sequence_++;
  if (!s.ok()) {
    if (slot.ok()) free_slots_.push_front(*slot);  // nothing points at it
    absl::MutexLock l(&mu_);
    ++stats_.rejected;
    return s;
  }
  {
    absl::MutexLock l(&mu_);
    for (const Victim& v : victims) {
      UnindexLocked(v.hash);
      ++stats_.evictions;
    }
    index_[w.meta.hash] = {*slot, w.meta.parent, w.length, w.checksum, sequence};
    policy_->InsertChild(w.meta.hash, w.meta.parent);
    ++stats_.puts;
    stats_.bytes_in += static_cast<int64_t>(options_.block_bytes);
    EmitLocked(TierEvent::Kind::kStored, w.meta.hash, w.meta.parent);
  }
  for (const Victim& v : victims) ReleaseSlotLocked(v.slot);
  if (options_.sync == DiskSyncMode::kNoWal) {
    bytes_since_flush_ += options_.block_bytes;
    // The Put is done either way; a failed flush leaves the slots pending until a later one.
    if (bytes_since_flush_ >= WriteBufferBytes(options_)) FlushIndexLocked().IgnoreError();
  }
  return absl::OkStatus();
}

std::span<std::byte> DiskTierImpl::WriteStagingLocked() {
  if (write_staging_ == nullptr) {
    write_staging_ = std::make_unique<AlignedBuffer>(slot_bytes_, /*huge_pages=*/staging_);
  }
  return write_staging_->span();
}

DiskTierImpl::ReadBuffer DiskTierImpl::AcquireReadBuffer(const void* dst) const {
  {
    absl::MutexLock p(&pool_mu_);
    if (staging_) {
      if (read_staging_ == nullptr) {
        const size_t count = ReadStagingBuffers(slot_bytes_);
        read_staging_ = std::make_unique<AlignedBuffer>(count * slot_bytes_, /*huge_pages=*/true);
        for (size_t i = count; i > 0; --i) free_read_staging_.push_back(static_cast<int>(i - 1));
      }
      if (!free_read_staging_.empty()) {
        const int i = free_read_staging_.back();
        free_read_staging_.pop_back();
        return {read_staging_->span().subspan(static_cast<size_t>(i) * slot_bytes_, slot_bytes_), i,
                nullptr};
      }
    }
    if (ZeroCopy(dst)) return {};
    if (!read_pool_.empty()) {
      std::unique_ptr<AlignedBuffer> pooled = std::move(read_pool_.back());
      read_pool_.pop_back();
      const std::span<std::byte> span = pooled->span();
      return {span, -1, std::move(pooled)};
    }
  }
  auto pooled = std::make_unique<AlignedBuffer>(slot_bytes_);
  const std::span<std::byte> span = pooled->span();
  return {span, -1, std::move(pooled)};
}

void DiskTierImpl::ReleaseReadBuffer(ReadBuffer buffer) const {
  if (buffer.staging_index < 0 && buffer.pooled == nullptr) return;
  absl::MutexLock p(&pool_mu_);
  if (buffer.staging_index >= 0) {
    free_read_staging_.push_back(buffer.staging_index);
  } else if (read_pool_.size() < kMaxPooledReadBuffers) {
    read_pool_.push_back(std::move(buffer.pooled));
  }
}

absl::Status DiskTierImpl::ReadSlot(const Entry& e, std::span<std::byte> dst) const {
  ReadBuffer buffer = AcquireReadBuffer(dst.data());
  const bool copied = !buffer.span.empty();
  const size_t read_bytes = file_->direct_io() ? AlignUp(dst.size()) : dst.size();
  const std::span<std::byte> payload = copied ? buffer.span.first(read_bytes) : dst;
  const std::span<std::byte> parts[] = {payload};
  absl::Status s = file_->Read(SlotOffset(e.slot), parts);
  if (s.ok()) {
    // A copied block is checksummed while it is copied out (dst is unspecified on failure).
    const uint64_t checksum =
        copied ? CopyWithBlockChecksum(dst, payload.first(dst.size())) : BlockChecksum(dst);
    s = VerifyBlock(checksum, options_.block_bytes,
                    IndexRecord{e.slot, e.parent, e.length, e.checksum, e.sequence});
  }
  ReleaseReadBuffer(std::move(buffer));
  return s;
}

absl::Status DiskTierImpl::Get(BlockHash hash, std::span<std::byte> dst) {
  if (dst.size() != options_.block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: Get into ", dst.size(),
                                                   " bytes, blocks are ", options_.block_bytes));
  }
  Entry e;
  {
    absl::MutexLock l(&mu_);
    auto it = index_.find(hash);
    if (it == index_.end()) {
      ++stats_.misses;
      return absl::NotFoundError("disk tier: block not present");
    }
    e = it->second;
  }
  // No lock held: the slot may be freed and rewritten meanwhile, which the checks catch.
  if (absl::Status s = ReadSlot(e, dst); !s.ok()) return ReadFailed(hash, e, s);
  absl::MutexLock l(&mu_);
  if (index_.contains(hash)) policy_->Touch(hash);
  ++stats_.hits;
  stats_.bytes_out += static_cast<int64_t>(dst.size());
  return absl::OkStatus();
}

absl::Status DiskTierImpl::ReadFailed(BlockHash hash, const Entry& read, const absl::Status& why) {
  // Under the write lock no slot changes hands, so "still indexed with the same sequence"
  // means the slot held this block during the whole read.
  absl::MutexLock w(&write_mu_);
  {
    absl::MutexLock l(&mu_);
    ++stats_.misses;
    auto it = index_.find(hash);
    if (it == index_.end() || it->second.sequence != read.sequence) {
      return absl::NotFoundError("disk tier: block evicted while being read");
    }
    if (why.code() != absl::StatusCode::kDataLoss) return why;  // I/O error: keep the block
    ++stats_.checksum_failures;
  }
  const absl::Status writable = EnsureWritableLocked();
  rocksdb::Status deleted = rocksdb::Status::IOError("index not writable");
  if (writable.ok()) {
    rocksdb::WriteBatch batch;
    const Key key = EncodeKey(hash);
    batch.Delete(KeySlice(key)).PermitUncheckedError();
    deleted = WriteLocked(&batch);
  }
  std::optional<Entry> dropped;
  {
    absl::MutexLock l(&mu_);
    // Unindexed even if the delete failed: a copy known to be bad is never offered again.
    dropped = UnindexLocked(hash);
  }
  // Its slot is reusable only once no durable entry points at it.
  if (dropped.has_value() && deleted.ok()) ReleaseSlotLocked(dropped->slot);
  return absl::DataLossError(absl::StrCat(why.message(), deleted.ok() ? "" : " (delete failed)"));
}

bool DiskTierImpl::Contains(BlockHash hash) const {
  absl::ReaderMutexLock l(&mu_);
  return index_.contains(hash);
}

absl::Status DiskTierImpl::Erase(BlockHash hash) {
  absl::MutexLock w(&write_mu_);
  {
    absl::ReaderMutexLock l(&mu_);
    if (!index_.contains(hash)) return absl::OkStatus();
  }
  STRATA_RETURN_IF_ERROR(EnsureWritableLocked());
  rocksdb::WriteBatch batch;
  const Key key = EncodeKey(hash);
  batch.Delete(KeySlice(key)).PermitUncheckedError();
  STRATA_RETURN_IF_ERROR(FromRocks(WriteLocked(&batch), "erase"));
  std::optional<Entry> erased;
  {
    absl::MutexLock l(&mu_);
    erased = UnindexLocked(hash);
  }
  if (erased.has_value()) ReleaseSlotLocked(erased->slot);
  return absl::OkStatus();
}

TierUsage DiskTierImpl::usage() const {
  absl::ReaderMutexLock l(&mu_);
  TierUsage u;
  u.blocks = static_cast<int64_t>(index_.size());
  u.bytes = u.blocks * static_cast<int64_t>(options_.block_bytes);
  u.capacity_bytes = capacity_blocks_ * static_cast<int64_t>(options_.block_bytes);
  return u;
}

TierStats DiskTierImpl::stats() const {
  TierStats s;
  {
    absl::ReaderMutexLock l(&mu_);
    s = stats_;
  }
  s.index_resets = index_resets_.load();
  s.index_dropped_entries = dropped_entries_.load();
  return s;
}

void DiskTierImpl::SetEventListener(TierEventListener listener) {
  absl::MutexLock l(&mu_);
  listener_ = std::move(listener);
}

std::vector<BlockMeta> DiskTierImpl::Blocks() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<BlockMeta> out;
  out.reserve(index_.size());
  for (const auto& [hash, e] : index_) out.push_back({hash, e.parent});
  return out;
}

absl::Status DiskTierImpl::Flush() {
  absl::MutexLock w(&write_mu_);
  STRATA_RETURN_IF_ERROR(file_->Sync());
  return FlushIndexLocked();
}

absl::StatusOr<uint64_t> DiskTierImpl::SlotOffsetForTest(BlockHash hash) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) return absl::NotFoundError("disk tier: block not present");
  return SlotOffset(it->second.slot);
}

absl::Status DiskTierImpl::PutRawForTest(BlockHash hash, std::string_view payload,
                                         uint64_t checksum) {
  absl::MutexLock w(&write_mu_);
  STRATA_RETURN_IF_ERROR(EnsureWritableLocked());
  std::vector<Victim> victims;
  {
    absl::MutexLock l(&mu_);
    if (std::optional<Entry> old = UnindexLocked(hash); old.has_value()) {
      victims.push_back({hash, old->slot});  // its key is overwritten, its slot freed
    }
    STRATA_ASSIGN_OR_RETURN(std::vector<Victim> more, PickVictimsLocked(1));
    victims.insert(victims.end(), more.begin(), more.end());
  }
  const std::span<std::byte> staging = WriteStagingLocked();
  std::memset(staging.data(), 0, staging.size());
  std::memcpy(staging.data(), payload.data(), std::min(payload.size(), staging.size()));
  return StoreLocked({{hash, kRootBlockHash}, payload.size(), checksum, staging}, victims);
}

}  // namespace strata::kvstore::disk_internal
