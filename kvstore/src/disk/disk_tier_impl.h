#pragma once
// The G3 tier's implementation class (disk_tier.h has the contract). Split by concern:
//   disk_tier.cc       the data path: Put, Get, Erase, slots
//   disk_tier_open.cc  opening, rebuilding the index, reopening after a failed write, Create
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "disk_tier_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "strata/kvstore/disk_tier.h"
#include "strata/kvstore/eviction_policy.h"

namespace strata::kvstore::disk_internal {

// RocksDB status -> canonical code: I/O trouble is retryable, corruption is data loss.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what);

// Spare slots beyond the capacity: under kNoWal an evicted block's slot waits for the next index
// flush (every write_buffer_bytes) before reuse; otherwise one spare slot lets a Put write its
// block before the batch that evicts a victim commits.
int64_t SpareSlots(const DiskTierOptions& options);
size_t WriteBufferBytes(const DiskTierOptions& options);

class DiskTierImpl final : public DiskTier {
 public:
  DiskTierImpl(const DiskTierOptions& options, int64_t capacity_blocks);
  ~DiskTierImpl() override;

  absl::Status Open();

  TierKind kind() const override { return TierKind::kDisk; }
  size_t block_bytes() const override { return options_.block_bytes; }
  absl::Status Put(const BlockMeta& meta, std::span<const std::byte> data) override;
  absl::Status Get(BlockHash hash, std::span<std::byte> dst) override;
  bool Contains(BlockHash hash) const override;
  absl::Status Erase(BlockHash hash) override;
  TierUsage usage() const override;
  TierStats stats() const override;
  void SetEventListener(TierEventListener listener) override;
  std::vector<BlockMeta> Blocks() const override;
  std::vector<BlockMeta> Contents() const override { return Blocks(); }
  absl::Status Flush() override;
  bool direct_io() const override { return file_->direct_io(); }
  bool huge_page_staging() const override { return staging_; }
  std::string data_file_path() const override;
  absl::StatusOr<uint64_t> SlotOffsetForTest(BlockHash hash) const override;
  absl::Status PutRawForTest(BlockHash hash, std::string_view payload, uint64_t checksum) override;
  IndexRecovery index_recovery() const override;

 private:
  // What the in-memory index holds per block (the IndexRecord, minus the key).
  struct Entry {
    uint64_t slot = 0;
    BlockHash parent = kRootBlockHash;
    uint64_t length = 0;
    uint64_t checksum = 0;
    uint64_t sequence = 0;  // unique per store: tells a block from a later copy of it
  };
  struct Victim {
    BlockHash hash;
    uint64_t slot;
  };
  // A block ready to be written into a slot.
  struct SlotWrite {
    BlockMeta meta;
    uint64_t length = 0;
    uint64_t checksum = 0;
    std::span<const std::byte> payload;  // the slot's bytes (aligned for O_DIRECT)
  };

  // --- disk_tier_open.cc ---
  absl::Status OpenDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_, db_mu_);
  // Opens the index and rebuilds from it. ResourceExhausted when the disk is full; any other
  // error means the index's content is bad.
  absl::Status LoadIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Closes the index, moves it aside (deleting it where it cannot be moved) with a warning
  // naming `why`, prunes old moved-aside indexes and counts the reset.
  absl::Status ResetIndexLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Deletes all but the newest kKeptCorruptIndexes moved-aside indexes.
  void PruneCorruptIndexes();
  void CloseDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  // (Re)builds the index, a fresh policy and the free slots from the RocksDB index, in store
  // order; drops unreadable records, records of another block size or beyond the slots, a slot
  // claimed twice (the older claim) (these three counted in dropped_entries_) and blocks
  // beyond capacity (the oldest); publishes kRemoved for indexed blocks that are no longer
  // there.
  absl::Status RebuildIndex() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // After a failed index write RocksDB refuses all further writes (DB::Resume cannot clear a
  // log write error): reopen it and rebuild the index before the next write.
  absl::Status EnsureWritableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Every index write goes through here.
  rocksdb::Status WriteLocked(rocksdb::WriteBatch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Flushes the index memtable; then slots waiting for it (kNoWal) become free.
  absl::Status FlushIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // --- disk_tier.cc ---
  absl::StatusOr<std::vector<Victim>> PickVictimsLocked(int64_t extra)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the block into a free slot, then commits its index entry with the victims'
  // deletions, then indexes it. Nothing changes if either write fails.
  absl::Status StoreLocked(const SlotWrite& w, const std::vector<Victim>& victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  absl::StatusOr<uint64_t> TakeFreeSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // A slot whose index entry's deletion has been written: free now, or after the next index
  // flush under kNoWal.
  void ReleaseSlotLocked(uint64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Removes `hash` from the index and policy, publishing kRemoved; its entry, if it was there.
  std::optional<Entry> UnindexLocked(BlockHash hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(TierEvent::Kind kind, BlockHash hash, BlockHash parent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Get whose read or check failed: DataLoss (dropped) if the block is still the one that
  // was read, NotFound if it was evicted or replaced meanwhile, else the I/O error.
  absl::Status ReadFailed(BlockHash hash, const Entry& read, const absl::Status& why);
  // Reads slot `e.slot` into `dst` and verifies it against `e`.
  absl::Status ReadSlot(const Entry& e, std::span<std::byte> dst) const;
  // Where a Get reads the slot: a huge-page staging buffer, else (none free, or no staging)
  // nothing, meaning `dst` itself, where it can take the read, else a pooled aligned buffer.
  struct ReadBuffer {
    std::span<std::byte> span;              // empty: read straight into dst
    int staging_index = -1;                 // which buffer of read_staging_, if one
    std::unique_ptr<AlignedBuffer> pooled;  // else this one, if any
  };
  ReadBuffer AcquireReadBuffer(const void* dst) const;
  void ReleaseReadBuffer(ReadBuffer buffer) const;
  // The buffer Puts stage unaligned blocks in (huge pages with staging_), made on first use.
  std::span<std::byte> WriteStagingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Whether `data` can go to / come from the file without a staging copy.
  bool ZeroCopy(const void* data) const;
  uint64_t SlotOffset(uint64_t slot) const { return slot * slot_bytes_; }

  const DiskTierOptions options_;
  const int64_t capacity_blocks_;
  const int64_t total_slots_;  // capacity + spare
  const size_t slot_bytes_;
  const rocksdb::WriteOptions write_options_;
  std::unique_ptr<SlotFile> file_;  // set by Open, then constant
  // Blocks go through huge-page staging buffers (options_.huge_page_staging, O_DIRECT and
  // transparent huge pages available); set by Open, then constant.
  bool staging_ = false;

  // Serializes every change (data file and index), so the in-memory index and the free slots
  // are updated only after the writes succeeded. Lock order: write_mu_, db_mu_, mu_, pool_mu_.
  absl::Mutex write_mu_;
  // Shared by every RocksDB call, exclusive while it is (re)opened or closed.
  mutable absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_;  // null after a failed reopen

  uint64_t next_sequence_ ABSL_GUARDED_BY(write_mu_) = 1;
  bool write_failed_ ABSL_GUARDED_BY(write_mu_) = false;
  std::deque<uint64_t> free_slots_ ABSL_GUARDED_BY(write_mu_);            // oldest freed first
  std::vector<uint64_t> flush_pending_slots_ ABSL_GUARDED_BY(write_mu_);  // kNoWal
  size_t bytes_since_flush_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Slots in the file: total_slots_, or more while blocks from a larger past capacity remain.
  uint64_t slot_limit_ ABSL_GUARDED_BY(write_mu_) = 0;
  std::unique_ptr<AlignedBuffer> write_staging_ ABSL_GUARDED_BY(write_mu_);

  // index_recovery()'s counts, written under write_mu_.
  std::atomic<int64_t> index_resets_{0};
  std::atomic<int64_t> dropped_entries_{0};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<BlockHash, Entry> index_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> policy_ ABSL_GUARDED_BY(mu_);
  TierStats stats_ ABSL_GUARDED_BY(mu_);
  TierEventListener listener_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex pool_mu_;
  // With staging_: slot-sized read buffers back to back in one huge-page allocation (made by
  // the first Get), and the indexes of the free ones. A Get that finds none free reads as
  // without staging.
  mutable std::unique_ptr<AlignedBuffer> read_staging_ ABSL_GUARDED_BY(pool_mu_);
  mutable std::vector<int> free_read_staging_ ABSL_GUARDED_BY(pool_mu_);
  // Slot-sized aligned buffers for reads that cannot go straight into the caller's buffer.
  mutable std::vector<std::unique_ptr<AlignedBuffer>> read_pool_ ABSL_GUARDED_BY(pool_mu_);
};

}  // namespace strata::kvstore::disk_internal
