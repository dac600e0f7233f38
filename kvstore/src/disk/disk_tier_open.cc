// G3 disk tier: opening the data file and the index, rebuilding the in-memory index, reopening
// the index after a failed write, Create (disk_tier.h).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "disk_tier_impl.h"
#include "rocksdb/env.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"

namespace strata::kvstore {
namespace disk_internal {

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

namespace {

inline constexpr char kCorruptIndexPrefix[] = "index.corrupt-";

// A full disk is the operator's to fix, not a sign of a bad index.
absl::Status FromRocksAtOpen(const rocksdb::Status& s, std::string_view what) {
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("disk tier ", std::string(what), ": ", s.ToString()));
  }
  return FromRocks(s, what);
}

// UTC now as 20260102T030405.123456Z: moved-aside indexes sort by age.
std::string UtcStamp() {
  const auto now = std::chrono::system_clock::now();
  const time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  return absl::StrCat(buf, ".", absl::Dec(micros, absl::kZeroPad6), "Z");
}

}  // namespace

size_t WriteBufferBytes(const DiskTierOptions& options) {
  if (options.write_buffer_bytes > 0) return options.write_buffer_bytes;
  return std::max<size_t>(size_t{64} << 20, 16 * options.block_bytes);
}

int64_t SpareSlots(const DiskTierOptions& options) {
  if (options.sync != DiskSyncMode::kNoWal) return 1;
  return std::max<int64_t>(1,
                           static_cast<int64_t>(WriteBufferBytes(options) / options.block_bytes));
}

DiskTierImpl::DiskTierImpl(const DiskTierOptions& options, int64_t capacity_blocks)
    : options_(options),
      capacity_blocks_(capacity_blocks),
      total_slots_(capacity_blocks + SpareSlots(options)),
      slot_bytes_(SlotBytes(options.block_bytes)),
      write_options_(MakeWriteOptions(options.sync)) {}

DiskTierImpl::~DiskTierImpl() {
  absl::MutexLock d(&db_mu_);
  CloseDbLocked();
  if (file_ != nullptr) file_->Sync().IgnoreError();
}

std::string DiskTierImpl::data_file_path() const {
  return absl::StrCat(options_.path, "/", kDataFileName);
}

void DiskTierImpl::CloseDbLocked() {
  if (db_ == nullptr) return;
  if (options_.sync == DiskSyncMode::kNoWal) {
    // Without a log, the memtable is the only copy of recent index entries.
    db_->Flush(rocksdb::FlushOptions()).PermitUncheckedError();
  }
  db_->Close().PermitUncheckedError();
  db_.reset();
}

absl::Status DiskTierImpl::Open() {
  if (options_.env != nullptr) {
    STRATA_RETURN_IF_ERROR(FromRocks(options_.env->CreateDirIfMissing(options_.path), "mkdir"));
    STRATA_ASSIGN_OR_RETURN(file_, OpenEnvSlotFile(options_.env, data_file_path()));
  } else {
    std::error_code ec;
    std::filesystem::create_directories(options_.path, ec);
    if (ec)
      return absl::UnavailableError(
          absl::StrCat("disk tier mkdir ", options_.path, ": ", ec.message()));
    STRATA_ASSIGN_OR_RETURN(file_, OpenPosixSlotFile(data_file_path(), options_.direct_io));
  }
  staging_ = options_.huge_page_staging && file_->direct_io() && TransparentHugePagesAvailable();
  absl::MutexLock w(&write_mu_);
  if (absl::Status s = LoadIndexLocked(); !s.ok()) {
    // The directory and the data file are usable, so the setting is right: the index's
    // content is bad (unless the disk is full). A cache starts empty rather than not at all.
    if (absl::IsResourceExhausted(s)) return s;
    STRATA_RETURN_IF_ERROR(ResetIndexLocked(s));
    STRATA_RETURN_IF_ERROR(LoadIndexLocked());
  }
  return file_->Resize(slot_limit_ * slot_bytes_);
}

DiskTier::IndexRecovery DiskTierImpl::index_recovery() const {
  return {index_resets_.load(), dropped_entries_.load()};
}

absl::Status DiskTierImpl::LoadIndexLocked() {
  {
    absl::MutexLock d(&db_mu_);
    STRATA_RETURN_IF_ERROR(OpenDbLocked());
  }
  return RebuildIndex();
}

absl::Status DiskTierImpl::ResetIndexLocked(const absl::Status& why) {
  {
    absl::MutexLock d(&db_mu_);
    CloseDbLocked();
  }
  const std::string dir = absl::StrCat(options_.path, "/", kIndexDirName);
  std::string aside = absl::StrCat(options_.path, "/", kCorruptIndexPrefix, UtcStamp());
  rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  for (int n = 1; env->FileExists(aside).ok(); ++n) {
    aside = absl::StrCat(options_.path, "/", kCorruptIndexPrefix, UtcStamp(), "-", n);
  }
  bool moved = env->RenameFile(dir, aside).ok();
  if (!moved) {
    rocksdb::Options o(MakeIndexDbOptions(options_), MakeIndexFamilyOptions());
    rocksdb::Status destroyed = rocksdb::DestroyDB(dir, o);
    if (!destroyed.ok()) {
      return FromRocks(destroyed,
                       absl::StrCat("delete unreadable index ", dir, " (", why.ToString(), ")"));
    }
  }
  ++index_resets_;
  STRATA_LOG(Warning) << "disk tier: index " << dir << " is unreadable (" << why.message() << "); "
                      << (moved ? "moved to " + aside : std::string("deleted"))
                      << ", starting empty";
  PruneCorruptIndexes();
  return absl::OkStatus();
}

void DiskTierImpl::PruneCorruptIndexes() {
  rocksdb::Env* env = options_.env != nullptr ? options_.env : rocksdb::Env::Default();
  std::vector<std::string> children, aside;
  if (!env->GetChildren(options_.path, &children).ok()) return;
  for (const std::string& c : children) {
    if (absl::StartsWith(c, kCorruptIndexPrefix)) aside.push_back(c);
  }
  if (aside.size() <= static_cast<size_t>(kKeptCorruptIndexes)) return;
  std::sort(aside.begin(), aside.end());
  aside.resize(aside.size() - kKeptCorruptIndexes);  // the oldest
  for (const std::string& c : aside) {
    const std::string p = absl::StrCat(options_.path, "/", c);
    if (options_.env == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
      continue;
    }
    std::vector<std::string> files;
    if (env->GetChildren(p, &files).ok()) {
      for (const std::string& f : files)
        env->DeleteFile(absl::StrCat(p, "/", f)).PermitUncheckedError();
    }
    env->DeleteDir(p).PermitUncheckedError();
  }
}

absl::Status DiskTierImpl::OpenDbLocked() {
  const std::string dir = absl::StrCat(options_.path, "/", kIndexDirName);
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, MakeIndexFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(MakeIndexDbOptions(options_), dir, families, &handles, &db);
  if (!s.ok()) return FromRocksAtOpen(s, absl::StrCat("open ", dir));
  db_.reset(db);
  // The default family's handle is owned by the DB; this one may be deleted.
  for (auto* h : handles) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  return absl::OkStatus();
}

absl::Status DiskTierImpl::RebuildIndex() {
  struct Loaded {
    BlockHash hash;
    IndexRecord record;
  };
  std::vector<Loaded> loaded;
  rocksdb::WriteBatch drop;
  {
    absl::ReaderMutexLock d(&db_mu_);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      Loaded l{};
      if (!DecodeKey(it->key().ToStringView(), &l.hash) ||
          !DecodeIndexRecord(it->value().ToStringView(), &l.record)) {
        ++dropped_entries_;
        drop.Delete(it->key()).PermitUncheckedError();
        continue;
      }
      loaded.push_back(l);
    }
    STRATA_RETURN_IF_ERROR(FromRocks(it->status(), "scan index"));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy,
                          CreateEvictionPolicy(options_.policy, capacity_blocks_));
  STRATA_ASSIGN_OR_RETURN(const uint64_t file_bytes, file_->Size());
  // Slots the file has now: a block beyond the configured slots (the capacity shrank) stays
  // where it is until it leaves; the file shrinks at a later open.
  const uint64_t file_slots =
      std::max<uint64_t>(static_cast<uint64_t>(total_slots_), file_bytes / slot_bytes_);
  // Newest first: a slot claimed twice belongs to the newer record; beyond capacity the oldest
  // go.
  std::sort(loaded.begin(), loaded.end(),
            [](const Loaded& a, const Loaded& b) { return a.record.sequence > b.record.sequence; });
  std::vector<bool> claimed(file_slots, false);
  std::vector<Loaded> kept;
  slot_limit_ = static_cast<uint64_t>(total_slots_);
  for (const Loaded& l : loaded) {
    next_sequence_ = std::max(next_sequence_, l.record.sequence + 1);
    const bool valid = l.record.slot < file_slots && !claimed[l.record.slot] &&
                       l.record.length == options_.block_bytes;
    if (!valid) ++dropped_entries_;
    if (!valid || static_cast<int64_t>(kept.size()) >= capacity_blocks_) {
      const Key key = EncodeKey(l.hash);
      drop.Delete(rocksdb::Slice(key.data(), key.size())).PermitUncheckedError();
      continue;
    }
    claimed[l.record.slot] = true;
    slot_limit_ = std::max(slot_limit_, l.record.slot + 1);
    kept.push_back(l);
  }
  free_slots_.clear();
  flush_pending_slots_.clear();
  bytes_since_flush_ = 0;
  for (int64_t s = 0; s < total_slots_; ++s) {
    if (!claimed[static_cast<size_t>(s)]) free_slots_.push_back(static_cast<uint64_t>(s));
  }
  {
    absl::MutexLock l(&mu_);
    absl::flat_hash_map<BlockHash, Entry> before = std::move(index_);
    index_.clear();
    policy_ = std::move(policy);
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {  // store order
      const IndexRecord& r = it->record;
      index_[it->hash] = {r.slot, r.parent, r.length, r.checksum, r.sequence};
      policy_->InsertChild(it->hash, r.parent);
    }
    for (const auto& [hash, e] : before) {
      if (!index_.contains(hash)) EmitLocked(TierEvent::Kind::kRemoved, hash, kRootBlockHash);
    }
  }
  if (drop.Count() == 0) return absl::OkStatus();
  STRATA_RETURN_IF_ERROR(FromRocksAtOpen(WriteLocked(&drop), "drop at open"));
  // The dropped records' slots are free already: make their deletion durable first.
  if (options_.sync == DiskSyncMode::kNoWal) return FlushIndexLocked();
  return absl::OkStatus();
}

absl::Status DiskTierImpl::EnsureWritableLocked() {
  if (!write_failed_) return absl::OkStatus();
  {
    absl::MutexLock d(&db_mu_);
    CloseDbLocked();
    STRATA_RETURN_IF_ERROR(OpenDbLocked());
  }
  write_failed_ = false;
  // With a log, the in-memory index is exactly the batches that committed (a failed one was
  // not applied; should its record have reached the log anyway, the next open resolves the
  // slot it shares with a newer block in the newer one's favour), and it keeps the recency
  // order a rebuild would lose. Without one, the index may have lost its memtable: rebuild.
  if (options_.sync != DiskSyncMode::kNoWal) return absl::OkStatus();
  return RebuildIndex();
}

rocksdb::Status DiskTierImpl::WriteLocked(rocksdb::WriteBatch* batch) {
  absl::ReaderMutexLock d(&db_mu_);
  if (db_ == nullptr) return rocksdb::Status::IOError("index closed");
  rocksdb::Status s = db_->Write(write_options_, batch);
  write_failed_ = !s.ok();
  return s;
}

absl::Status DiskTierImpl::FlushIndexLocked() {
  {
    absl::ReaderMutexLock d(&db_mu_);
    if (db_ == nullptr) return absl::UnavailableError("disk tier: index closed");
    STRATA_RETURN_IF_ERROR(FromRocks(db_->Flush(rocksdb::FlushOptions()), "index flush"));
  }
  free_slots_.insert(free_slots_.end(), flush_pending_slots_.begin(), flush_pending_slots_.end());
  flush_pending_slots_.clear();
  bytes_since_flush_ = 0;
  return absl::OkStatus();
}

}  // namespace disk_internal

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
  // Checked before any file is created.
  STRATA_RETURN_IF_ERROR(CreateEvictionPolicy(options.policy, capacity_blocks).status());
  auto tier = std::make_unique<disk_internal::DiskTierImpl>(options, capacity_blocks);
  STRATA_RETURN_IF_ERROR(tier->Open());
  return tier;
}

}  // namespace strata::kvstore
