// G3 disk tier on RocksDB (disk_tier.h). Formats and options: disk_tier_internal.h.
#include "strata/kvstore/disk_tier.h"

#include <algorithm>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "disk_tier_internal.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/eviction_policy.h"

namespace strata::kvstore {
namespace {

using disk_internal::EncodeKey;

rocksdb::Slice KeySlice(const disk_internal::Key& key) {
  return rocksdb::Slice(key.data(), key.size());
}

// RocksDB status -> canonical code: I/O trouble is retryable, corruption is data loss.
absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("disk tier ", std::string(what), ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTryAgain() || s.IsTimedOut() || s.IsIncomplete()) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

class DiskTierImpl final : public DiskTier {
 public:
  DiskTierImpl(const DiskTierOptions& options, int64_t capacity_blocks)
      : options_(options),
        capacity_blocks_(capacity_blocks),
        write_options_(disk_internal::MakeWriteOptions(options.sync)),
        direct_io_(options.direct_io && disk_internal::SupportsDirectIo(options)) {
    // Blob layout: cache the small SST blocks that map keys to blob offsets (values are never
    // cached: no blob cache). SST layout: the data blocks are the values, read once.
    read_options_.fill_cache = options.layout == DiskValueLayout::kBlobFiles;
    // Every value carries the tier's own XXH3 checksum, verified end to end on each Get;
    // RocksDB's software CRC32C over the same bytes would cost more than the read itself.
    read_options_.verify_checksums = false;
  }
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
  absl::Status PutRawForTest(BlockHash hash, std::string_view value) override;

 private:
  absl::Status OpenDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_, db_mu_);
  void CloseDbLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(db_mu_);
  // (Re)builds the index and a fresh policy from the meta family, in store order; drops
  // unreadable records and blocks beyond capacity; publishes kRemoved for indexed blocks that
  // are no longer there.
  absl::Status RebuildIndex() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Victims that make room for one more block; ResourceExhausted if none can be found.
  absl::StatusOr<std::vector<BlockHash>> PickVictimsLocked(int64_t extra)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `value_parts` under meta.hash (deleting `victims` in the same batch) and indexes it.
  absl::Status StoreLocked(const BlockMeta& meta, rocksdb::SliceParts value,
                           const std::vector<BlockHash>& victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void DeleteKeys(rocksdb::WriteBatch* batch, BlockHash hash);
  // Every database write goes through here. After a failed write RocksDB refuses all further
  // writes (DB::Resume cannot clear a log write error), so the next write first reopens the
  // database: a disk that healed does not need a process restart.
  rocksdb::Status WriteLocked(rocksdb::WriteBatch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Removes `hash` from the index and policy, publishing kRemoved. No-op if absent.
  void UnindexLocked(BlockHash hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(TierEvent::Kind kind, BlockHash hash, BlockHash parent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Get found a bad copy: delete it from disk and the index; always DataLoss.
  absl::Status DropCorrupt(BlockHash hash, const absl::Status& why);
  // Get found no value for an indexed hash: unindex it if the database really lacks it.
  void DropIfMissing(BlockHash hash);

  const DiskTierOptions options_;
  const int64_t capacity_blocks_;
  const rocksdb::WriteOptions write_options_;
  const bool direct_io_;
  rocksdb::ReadOptions read_options_;
  // Serializes every change of the database, so the index can be updated after a write
  // succeeds without another writer interleaving. Lock order: write_mu_, db_mu_, mu_.
  absl::Mutex write_mu_;
  // Shared by every database call, exclusive while the database is (re)opened or closed.
  // The handles change only with write_mu_ and db_mu_ both held exclusively, so holding
  // either one is enough to read them.
  mutable absl::Mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_;  // null after a failed reopen
  rocksdb::ColumnFamilyHandle* data_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;

  uint64_t next_sequence_ ABSL_GUARDED_BY(write_mu_) = 1;
  bool write_failed_ ABSL_GUARDED_BY(write_mu_) = false;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<BlockHash, BlockHash> index_ ABSL_GUARDED_BY(mu_);  // hash -> parent
  std::unique_ptr<EvictionPolicy> policy_ ABSL_GUARDED_BY(mu_);
  TierStats stats_ ABSL_GUARDED_BY(mu_);
  TierEventListener listener_ ABSL_GUARDED_BY(mu_);
};

DiskTierImpl::~DiskTierImpl() {
  absl::MutexLock d(&db_mu_);
  CloseDbLocked();
}

void DiskTierImpl::CloseDbLocked() {
  if (db_ == nullptr) return;
  if (options_.sync == DiskSyncMode::kNoWal) {
    // Without a log, the memtables are the only copy of recent blocks.
    db_->Flush(rocksdb::FlushOptions(), {data_cf_, meta_cf_}).PermitUncheckedError();
  }
  for (auto* cf : {data_cf_, meta_cf_}) {
    if (cf != nullptr) db_->DestroyColumnFamilyHandle(cf).PermitUncheckedError();
  }
  data_cf_ = meta_cf_ = nullptr;
  db_->Close().PermitUncheckedError();
  db_.reset();
}

absl::Status DiskTierImpl::Open() {
  absl::MutexLock w(&write_mu_);
  {
    absl::MutexLock d(&db_mu_);
    STRATA_RETURN_IF_ERROR(OpenDbLocked());
  }
  return RebuildIndex();
}

absl::Status DiskTierImpl::OpenDbLocked() {
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, disk_internal::MakeDataFamilyOptions(options_)},
      {disk_internal::kMetaFamily, disk_internal::MakeMetaFamilyOptions(options_)}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(disk_internal::MakeDbOptions(options_, direct_io_),
                                        options_.path, families, &handles, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open ", options_.path));
  db_.reset(db);
  data_cf_ = handles[0];
  meta_cf_ = handles[1];
  return absl::OkStatus();
}

absl::Status DiskTierImpl::RebuildIndex() {
  struct Loaded {
    uint64_t sequence;
    BlockHash hash;
    BlockHash parent;
  };
  std::vector<Loaded> loaded;
  rocksdb::WriteBatch drop;
  {
    absl::ReaderMutexLock d(&db_mu_);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options_, meta_cf_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      BlockHash hash = 0;
      disk_internal::MetaRecord record;
      if (!disk_internal::DecodeKey(it->key().ToStringView(), &hash) ||
          !disk_internal::DecodeMeta(it->value().ToStringView(), &record)) {
        drop.Delete(data_cf_, it->key()).PermitUncheckedError();
        drop.Delete(meta_cf_, it->key()).PermitUncheckedError();
        continue;
      }
      loaded.push_back({record.sequence, hash, record.parent});
    }
    STRATA_RETURN_IF_ERROR(FromRocks(it->status(), "scan meta"));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy,
                          CreateEvictionPolicy(options_.policy, capacity_blocks_));
  std::sort(loaded.begin(), loaded.end(),
            [](const Loaded& a, const Loaded& b) { return a.sequence < b.sequence; });
  // Over capacity (the bound shrank since the last run): keep the most recently stored.
  size_t skip = loaded.size() > static_cast<size_t>(capacity_blocks_)
                    ? loaded.size() - static_cast<size_t>(capacity_blocks_)
                    : 0;
  {
    absl::MutexLock l(&mu_);
    absl::flat_hash_map<BlockHash, BlockHash> before = std::move(index_);
    index_.clear();
    policy_ = std::move(policy);
    for (size_t i = 0; i < loaded.size(); ++i) {
      next_sequence_ = std::max(next_sequence_, loaded[i].sequence + 1);
      if (i < skip) {
        DeleteKeys(&drop, loaded[i].hash);
        continue;
      }
      index_[loaded[i].hash] = loaded[i].parent;
      policy_->Insert(loaded[i].hash);
    }
    for (const auto& [hash, parent] : before) {
      if (!index_.contains(hash)) EmitLocked(TierEvent::Kind::kRemoved, hash, kRootBlockHash);
    }
  }
  if (drop.Count() == 0) return absl::OkStatus();
  return FromRocks(WriteLocked(&drop), "drop at open");
}

void DiskTierImpl::DeleteKeys(rocksdb::WriteBatch* batch, BlockHash hash) {
  const disk_internal::Key key = EncodeKey(hash);
  batch->Delete(data_cf_, KeySlice(key)).PermitUncheckedError();
  batch->Delete(meta_cf_, KeySlice(key)).PermitUncheckedError();
}

rocksdb::Status DiskTierImpl::WriteLocked(rocksdb::WriteBatch* batch) {
  if (write_failed_) {
    {
      absl::MutexLock d(&db_mu_);
      CloseDbLocked();
      absl::Status reopened = OpenDbLocked();
      if (!reopened.ok()) return rocksdb::Status::IOError(std::string(reopened.message()));
    }
    write_failed_ = false;
    // The failed batch never became visible, so this finds the same blocks (store order).
    absl::Status rebuilt = RebuildIndex();
    if (!rebuilt.ok()) return rocksdb::Status::IOError(std::string(rebuilt.message()));
  }
  absl::ReaderMutexLock d(&db_mu_);
  if (db_ == nullptr) return rocksdb::Status::IOError("database closed");
  rocksdb::Status s = db_->Write(write_options_, batch);
  write_failed_ = !s.ok();
  return s;
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

void DiskTierImpl::UnindexLocked(BlockHash hash) {
  if (index_.erase(hash) == 0) return;
  policy_->Erase(hash);
  EmitLocked(TierEvent::Kind::kRemoved, hash, kRootBlockHash);
}

absl::StatusOr<std::vector<BlockHash>> DiskTierImpl::PickVictimsLocked(int64_t extra) {
  std::vector<BlockHash> victims;
  const int64_t need = static_cast<int64_t>(index_.size()) + extra - capacity_blocks_;
  for (int64_t i = 0; i < need; ++i) {
    // Disk blocks are never leased: the only keys skipped are the ones already chosen.
    std::optional<BlockHash> victim = policy_->Victim([&](BlockHash key) {
      return std::find(victims.begin(), victims.end(), key) == victims.end();
    });
    if (!victim.has_value()) {
      return absl::ResourceExhaustedError("disk tier: no block can be evicted");
    }
    victims.push_back(*victim);
  }
  return victims;
}

absl::Status DiskTierImpl::Put(const BlockMeta& meta, std::span<const std::byte> data) {
  if (data.size() != options_.block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: Put of ", data.size(),
                                                   " bytes, blocks are ", options_.block_bytes));
  }
  const disk_internal::EncodedHeader header =
      disk_internal::EncodeHeader({meta.hash, meta.parent, data.size(), BlockChecksum(data)});
  const rocksdb::Slice parts[2] = {
      rocksdb::Slice(header.data(), header.size()),
      rocksdb::Slice(reinterpret_cast<const char*>(data.data()), data.size())};
  absl::MutexLock w(&write_mu_);
  std::vector<BlockHash> victims;
  {
    absl::MutexLock l(&mu_);
    if (index_.contains(meta.hash)) {
      policy_->Touch(meta.hash);
      return absl::OkStatus();
    }
    absl::StatusOr<std::vector<BlockHash>> picked = PickVictimsLocked(1);
    if (!picked.ok()) {
      ++stats_.rejected;
      return picked.status();
    }
    victims = *std::move(picked);
  }
  return StoreLocked(meta, rocksdb::SliceParts(parts, 2), victims);
}

absl::Status DiskTierImpl::StoreLocked(const BlockMeta& meta, rocksdb::SliceParts value,
                                       const std::vector<BlockHash>& victims) {
  const disk_internal::Key key = EncodeKey(meta.hash);
  const rocksdb::Slice key_slice = KeySlice(key);
  const auto record = disk_internal::EncodeMeta({meta.parent, next_sequence_});
  rocksdb::WriteBatch batch;
  for (BlockHash victim : victims) DeleteKeys(&batch, victim);
  rocksdb::Status s = batch.Put(data_cf_, rocksdb::SliceParts(&key_slice, 1), value);
  if (s.ok()) s = batch.Put(meta_cf_, key_slice, rocksdb::Slice(record.data(), record.size()));
  if (s.ok()) s = WriteLocked(&batch);
  absl::MutexLock l(&mu_);
  if (!s.ok()) {
    ++stats_.rejected;
    return FromRocks(s, "put");
  }
  ++next_sequence_;
  for (BlockHash victim : victims) {
    UnindexLocked(victim);
    ++stats_.evictions;
  }
  index_[meta.hash] = meta.parent;
  policy_->Insert(meta.hash);
  ++stats_.puts;
  stats_.bytes_in += static_cast<int64_t>(options_.block_bytes);
  EmitLocked(TierEvent::Kind::kStored, meta.hash, meta.parent);
  return absl::OkStatus();
}

absl::Status DiskTierImpl::Get(BlockHash hash, std::span<std::byte> dst) {
  if (dst.size() != options_.block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: Get into ", dst.size(),
                                                   " bytes, blocks are ", options_.block_bytes));
  }
  {
    absl::MutexLock l(&mu_);
    if (!index_.contains(hash)) {
      ++stats_.misses;
      return absl::NotFoundError("disk tier: block not present");
    }
  }
  const disk_internal::Key key = EncodeKey(hash);
  rocksdb::PinnableSlice value;
  rocksdb::Status s;
  {
    absl::ReaderMutexLock d(&db_mu_);
    s = db_ == nullptr ? rocksdb::Status::IOError("database closed")
                       : db_->Get(read_options_, data_cf_, KeySlice(key), &value);
  }
  if (s.IsNotFound()) {  // evicted or erased since the index said present
    DropIfMissing(hash);
    return absl::NotFoundError("disk tier: block not present");
  }
  if (s.IsCorruption()) return DropCorrupt(hash, FromRocks(s, "get"));
  if (!s.ok()) {
    absl::MutexLock l(&mu_);
    ++stats_.misses;
    return FromRocks(s, "get");
  }
  absl::Status verified = disk_internal::DecodeValue(value.ToStringView(), hash, dst);
  if (!verified.ok()) return DropCorrupt(hash, verified);
  absl::MutexLock l(&mu_);
  if (index_.contains(hash)) policy_->Touch(hash);
  ++stats_.hits;
  stats_.bytes_out += static_cast<int64_t>(dst.size());
  return absl::OkStatus();
}

void DiskTierImpl::DropIfMissing(BlockHash hash) {
  absl::MutexLock w(&write_mu_);
  const disk_internal::Key key = EncodeKey(hash);
  std::string ignored;
  bool missing = false;
  {
    absl::ReaderMutexLock d(&db_mu_);
    missing =
        db_ != nullptr && db_->Get(read_options_, data_cf_, KeySlice(key), &ignored).IsNotFound();
  }
  absl::MutexLock l(&mu_);
  ++stats_.misses;
  if (!missing || !index_.contains(hash)) return;
  // The index outlived its value (cannot happen with atomic batches; heal it anyway).
  rocksdb::WriteBatch batch;
  DeleteKeys(&batch, hash);
  if (WriteLocked(&batch).ok()) UnindexLocked(hash);
}

absl::Status DiskTierImpl::DropCorrupt(BlockHash hash, const absl::Status& why) {
  absl::MutexLock w(&write_mu_);
  rocksdb::WriteBatch batch;
  DeleteKeys(&batch, hash);
  const rocksdb::Status s = WriteLocked(&batch);
  absl::MutexLock l(&mu_);
  ++stats_.checksum_failures;
  ++stats_.misses;
  // Unindexed even if the delete failed: a copy known to be bad is never offered again.
  UnindexLocked(hash);
  return absl::DataLossError(absl::StrCat(why.message(), s.ok() ? "" : " (delete failed)"));
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
  rocksdb::WriteBatch batch;
  DeleteKeys(&batch, hash);
  STRATA_RETURN_IF_ERROR(FromRocks(WriteLocked(&batch), "erase"));
  absl::MutexLock l(&mu_);
  UnindexLocked(hash);
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
  absl::ReaderMutexLock l(&mu_);
  return stats_;
}

void DiskTierImpl::SetEventListener(TierEventListener listener) {
  absl::MutexLock l(&mu_);
  listener_ = std::move(listener);
}

std::vector<BlockMeta> DiskTierImpl::Blocks() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<BlockMeta> out;
  out.reserve(index_.size());
  for (const auto& [hash, parent] : index_) out.push_back({hash, parent});
  return out;
}

absl::Status DiskTierImpl::Flush() {
  absl::ReaderMutexLock d(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("disk tier: database closed");
  return FromRocks(db_->Flush(rocksdb::FlushOptions(), {data_cf_, meta_cf_}), "flush");
}

absl::Status DiskTierImpl::PutRawForTest(BlockHash hash, std::string_view value) {
  absl::MutexLock w(&write_mu_);
  std::vector<BlockHash> victims;
  {
    absl::MutexLock l(&mu_);
    UnindexLocked(hash);
    STRATA_ASSIGN_OR_RETURN(victims, PickVictimsLocked(1));
  }
  const rocksdb::Slice part(value.data(), value.size());
  return StoreLocked({hash, kRootBlockHash}, rocksdb::SliceParts(&part, 1), victims);
}

}  // namespace

absl::StatusOr<DiskSyncMode> ParseDiskSyncMode(std::string_view name) {
  if (name == "none") return DiskSyncMode::kNoWal;
  if (name == "wal") return DiskSyncMode::kWal;
  if (name == "wal-sync") return DiskSyncMode::kWalSync;
  return absl::InvalidArgumentError(
      absl::StrCat("disk sync mode \"", std::string(name), "\": expected none, wal or wal-sync"));
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Create(const DiskTierOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("disk tier: empty path");
  if (options.block_bytes == 0) return absl::InvalidArgumentError("disk tier: block_bytes 0");
  const int64_t capacity_blocks =
      options.capacity_bytes / static_cast<int64_t>(options.block_bytes);
  if (capacity_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: capacity ", options.capacity_bytes,
                                                   " bytes holds no block of ",
                                                   options.block_bytes));
  }
  auto tier = std::make_unique<DiskTierImpl>(options, capacity_blocks);
  STRATA_RETURN_IF_ERROR(tier->Open());
  return tier;
}

}  // namespace strata::kvstore
