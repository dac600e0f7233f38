#pragma once
// G3: KV blocks in RocksDB on a local path (an SSD), bounded, checksummed, crash-safe.
//
// Layout (docs/kvstore_disk.md has the numbers behind the choices):
//   column family "default"  key = 8-byte big-endian block hash
//                            value = 40-byte header (magic, version, hash, parent, length,
//                                    BlockChecksum) || block bytes
//   column family "meta"     key = the same 8 bytes
//                            value = parent hash, store sequence (16 bytes)
// Both column families are written in one WriteBatch per Put (atomic) and flushed together
// (atomic_flush), so after any crash a block's meta entry exists exactly when its value does.
// Open rebuilds the in-memory index (hash -> parent, eviction order, usage) by scanning only
// the small "meta" family, never the values. The eviction order after a restart is the order
// in which blocks were stored (reads since the last store are not persisted): approximate
// recency, as the contract allows.
//
// Every Get verifies the header and the checksum; a bad copy is deleted, counted
// (checksum_failures and misses), published as kRemoved and reported as DataLoss.
//
// A failed write (I/O error) is rejected and leaves nothing visible; RocksDB then refuses
// writes, so the next write reopens the database first (a disk that healed needs no restart).
//
// All file access goes through `options.env` (tests pass rocksdb::NewMemEnv or a
// fault-injecting Env). Durability is chosen by `sync` (DiskSyncMode below).
//
// Thread-safety: every method is thread-safe. Writes (Put, Erase, dropping a corrupt copy)
// are serialized; reads run concurrently with each other and with writes.
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
// verifies); they differ in how many recently stored blocks a crash may lose.
enum class DiskSyncMode : uint8_t {
  // No write-ahead log: a Put is in memory until the memtable is flushed (every
  // write_buffer_bytes). A process crash loses the blocks stored since the last flush. Each
  // byte is written to disk once (fastest). A clean close flushes.
  kNoWal,
  // Write-ahead log written (not fsynced) on every Put: a process crash (SIGKILL) loses
  // nothing that Put acknowledged; a power loss may lose the OS-buffered tail. Each byte is
  // written twice (log, then blob file at flush).
  kWal,
  // As kWal plus fsync on every Put: survives power loss; slowest.
  kWalSync,
};
// "none" / "wal" / "wal-sync"; InvalidArgument otherwise.
absl::StatusOr<DiskSyncMode> ParseDiskSyncMode(std::string_view name);

// Where the value bytes live inside RocksDB.
enum class DiskValueLayout : uint8_t {
  // Integrated BlobDB: values in blob files, the LSM holds only keys and blob references, so
  // compaction never rewrites block bytes (blob GC relocates live values from old files).
  kBlobFiles,
  // Values inline in SST files with large (256 KiB) data blocks: compaction rewrites values.
  // Fills faster where RocksDB's CRC32C is software (blob records are always CRC32C'd, SST
  // blocks use XXH3), reads slower; docs/kvstore_disk.md has both measured.
  kSstInline,
};

struct DiskTierOptions {
  std::string path;  // database directory (created if missing)
  size_t block_bytes = 0;
  int64_t capacity_bytes = 0;  // value bytes; rounded down to whole blocks, at least one
  std::string policy = "lru";  // eviction_policy.h name
  // kNoWal by default: G3 is a cache, a crash costs at most one memtable of recently demoted
  // blocks (misses, never wrong data), and a log would double the bytes written.
  DiskSyncMode sync = DiskSyncMode::kNoWal;
  DiskValueLayout layout = DiskValueLayout::kBlobFiles;
  // Memtable size (also the unit of loss under kNoWal). 0: max(64 MiB, 16 blocks).
  size_t write_buffer_bytes = 0;
  // O_DIRECT reads and flush/compaction writes, where the file system supports it (probed at
  // Create; buffered otherwise).
  bool direct_io = true;
  // File system access; nullptr: rocksdb::Env::Default(). Not owned; outlives the tier.
  rocksdb::Env* env = nullptr;
};

class DiskTier : public Tier {
 public:
  // Opens (or creates) the database at options.path and rebuilds the index. InvalidArgument
  // for bad options; Unavailable / DataLoss when the database cannot be opened.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Create(const DiskTierOptions& options);

  // Every block held (unordered), e.g. to republish kStored events for the blocks that
  // survived a restart: Open publishes no events.
  virtual std::vector<BlockMeta> Blocks() const = 0;

  // Flushes memtables to disk (a no-op for data already flushed).
  [[nodiscard]] virtual absl::Status Flush() = 0;

  // Stores raw `value` bytes under `hash`'s key, bypassing header and checksum creation, and
  // indexes it as present: lets tests plant corrupt values.
  [[nodiscard]] virtual absl::Status PutRawForTest(BlockHash hash, std::string_view value) = 0;
};

}  // namespace strata::kvstore
