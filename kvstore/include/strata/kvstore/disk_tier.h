#pragma once
// G3: KV blocks on a local path (an SSD), bounded, checksummed, crash-safe.
//
// Layout (docs/kvstore_disk.md has the numbers behind the choices):
//   PATH/blocks.data  the values: a preallocated file of fixed-size slots, one block per slot
//                     (block_bytes rounded up to 4 KiB, nothing else), written and read with
//                     O_DIRECT: one pwrite / pread per block. A Put writes straight from the
//                     caller's buffer when it is page-aligned; a Get reads into a staging
//                     buffer of transparent huge pages (huge_page_staging below) or, without
//                     one, straight into the caller's buffer when it is page-aligned.
//   PATH/index/       RocksDB, the index and metadata only: block hash -> slot, length,
//                     checksum (BlockChecksum), parent, store sequence (40 bytes a block). It
//                     never holds values.
//
// Write order: the block goes into a *free* slot first (a slot no durable index entry points
// to), then one RocksDB WriteBatch adds its index entry and deletes the entries of the blocks it
// evicts; an evicted block's slot is reused only once its deletion is durable (sync mode below).
// So a crash leaves every durable index entry pointing either at its own block or, if the data
// never fully reached the disk, at bytes that fail the checksum: such a block is dropped on its
// first read (DataLoss, counted), never served.
//
// Open rebuilds the in-memory index (hash -> slot, parent, eviction order, usage, free slots)
// by scanning the RocksDB index only, never the values. The eviction order after a restart is
// the order in which blocks were stored (reads since are not persisted): approximate recency,
// as the contract allows.
//
// Every Get verifies the checksum of the bytes read against the index (and the length); a bad
// copy is unindexed and its slot freed, counted (checksum_failures and misses), published as
// kRemoved and reported as DataLoss. On any error `dst`'s contents are unspecified (the block
// may be read straight into it).
//
// A damaged index is a lost cache, never a failed start: Open moves an index that cannot be
// opened or scanned (corrupt or missing RocksDB files) aside to PATH/index.corrupt-<UTC time>
// (keeping the newest kKeptCorruptIndexes), logs one warning and starts empty; index entries
// that do not decode or that no slot can hold are dropped one by one. Both are counted
// (index_recovery()). Settings that are wrong (PATH a file, no permission to create it, no
// space to create the files) still fail Create.
//
// A failed write (I/O error) is rejected and leaves nothing visible (no new block, no
// eviction); after a failed index write RocksDB refuses writes, so the next write reopens the
// index first (a disk that healed needs no restart).
//
// File access: the POSIX file API with O_DIRECT by default (buffered where the file system
// refuses O_DIRECT, e.g. tmpfs before Linux 6.6; direct_io() says which); when `options.env` is
// set, every file (index and data) goes through that rocksdb::Env instead, buffered (tests pass
// rocksdb::NewMemEnv or a fault-injecting Env).
//
// Thread-safety: every method is thread-safe. Writes (Put, Erase, dropping a corrupt copy) are
// serialized; reads run concurrently with each other and with writes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/kvstore/tier.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace strata::kvstore {

// What survives a crash. Every mode keeps the store consistent (a block is served only if it
// verifies); they differ in how many recently stored blocks a crash may lose. The block bytes
// always go straight to the data file; only the small index entries are logged.
enum class DiskSyncMode : uint8_t {
  // No index log: index entries reach disk when the index is flushed, every
  // write_buffer_bytes of stored blocks. A crash loses the blocks stored since then (their
  // slots are simply free again). Slots freed by eviction wait for that flush before reuse,
  // so the data file holds write_buffer_bytes of spare slots beyond the capacity.
  kNoWal,
  // Index log written (not fsynced) with every Put, ~100 bytes: a process crash (SIGKILL) loses
  // nothing that Put acknowledged; a power loss may lose the OS-buffered tail of the log.
  kWal,
  // As kWal plus fdatasync of the data file and fsync of the log on every Put: survives power
  // loss; slowest.
  kWalSync,
};
// "none" / "wal" / "wal-sync"; InvalidArgument otherwise.
absl::StatusOr<DiskSyncMode> ParseDiskSyncMode(std::string_view name);

struct DiskTierOptions {
  std::string path;  // directory (created if missing): blocks.data and index/
  size_t block_bytes = 0;
  int64_t capacity_bytes = 0;  // value bytes; rounded down to whole blocks, at least one
  std::string policy = "lru";  // eviction_policy.h name
  // kWal by default: the log holds only index entries, so it costs one small buffered append
  // per Put and a process crash loses no acknowledged block.
  DiskSyncMode sync = DiskSyncMode::kWal;
  // Under kNoWal: how many bytes of stored blocks between index flushes (the unit of loss in a
  // crash, and the spare slots of the data file). 0: max(64 MiB, 16 blocks).
  size_t write_buffer_bytes = 0;
  // O_DIRECT on the data file where the file system supports it (probed at Create; buffered
  // otherwise). Ignored when `env` is set.
  bool direct_io = true;
  // With O_DIRECT: every Get reads the block into a staging buffer of transparent huge pages
  // and copies it to the caller's buffer in the same pass as its checksum (a Put that needs a
  // staging copy, for an unaligned buffer, uses huge pages too). An O_DIRECT request into
  // ordinary memory carries one segment per 4 KiB page (64 for a 256 KiB block); into a huge
  // page it is one segment. Measured 1.6-1.7x the read bandwidth of reading into the caller's
  // 4 KiB pages on virtio disks, no difference for writes (docs/kvstore_disk.md). Ignored where
  // transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled is "never") or
  // I/O is buffered; huge_page_staging() says whether it is in effect.
  bool huge_page_staging = true;
  // File system access; nullptr: the POSIX API (data) and rocksdb::Env::Default() (index).
  // Not owned; outlives the tier.
  rocksdb::Env* env = nullptr;
};

class DiskTier : public Tier {
 public:
  // Opens (or creates) the store at options.path and rebuilds the index. InvalidArgument for
  // bad options; Unavailable when the directory or the data file cannot be created or opened,
  // ResourceExhausted when the disk is full, or an error when even a fresh index cannot be
  // made. A corrupt or unreadable index is not an error (it is reset, above).
  static absl::StatusOr<std::unique_ptr<DiskTier>> Create(const DiskTierOptions& options);

  // Every block held (unordered), e.g. to republish kStored events for the blocks that
  // survived a restart: Open publishes no events.
  virtual std::vector<BlockMeta> Blocks() const = 0;

  // Makes everything stored so far durable: fdatasync of the data file, index memtable flush.
  [[nodiscard]] virtual absl::Status Flush() = 0;

  // What Open recovered from (the header comment; counts since Create).
  struct IndexRecovery {
    int64_t resets = 0;           // indexes moved aside, the tier started empty
    int64_t dropped_entries = 0;  // malformed index entries dropped while loading
  };
  virtual IndexRecovery index_recovery() const = 0;
  // How many moved-aside indexes Open keeps (the newest); older ones are deleted.
  static constexpr int kKeptCorruptIndexes = 2;

  // Whether the data file is read and written with O_DIRECT.
  virtual bool direct_io() const = 0;
  // Whether Gets read through huge pages (DiskTierOptions::huge_page_staging).
  virtual bool huge_page_staging() const = 0;
  // Path of the data file and the byte offset of `hash`'s slot (its block) in it; NotFound if
  // absent. Lets tests damage a block on disk.
  virtual std::string data_file_path() const = 0;
  virtual absl::StatusOr<uint64_t> SlotOffsetForTest(BlockHash hash) const = 0;

  // Stores `payload` (at most block_bytes of it) in a slot under `hash`, indexed with
  // `checksum` and length payload.size(), unchecked: lets tests plant corrupt blocks.
  [[nodiscard]] virtual absl::Status PutRawForTest(BlockHash hash, std::string_view payload,
                                                   uint64_t checksum) = 0;
};

}  // namespace strata::kvstore
