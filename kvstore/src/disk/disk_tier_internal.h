#pragma once
// The G3 on-disk formats (index keys and records, slots), the RocksDB options of the index,
// and the data file interface, shared by the tier and its tests. Every integer is
// encoded little-endian except keys, which are big-endian so that RocksDB's bytewise order is
// numeric order.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rocksdb/options.h"
#include "strata/kvstore/disk_tier.h"

namespace strata::kvstore::disk_internal {

inline constexpr size_t kKeyBytes = 8;
// slot u64, parent u64, length u64, checksum u64, store sequence u64.
inline constexpr size_t kIndexRecordBytes = 40;
// O_DIRECT alignment of offsets, lengths and buffers.
inline constexpr size_t kIoAlign = 4096;
inline constexpr char kDataFileName[] = "blocks.data";
inline constexpr char kIndexDirName[] = "index";

inline constexpr size_t AlignUp(size_t n) { return (n + kIoAlign - 1) / kIoAlign * kIoAlign; }
// Bytes of one slot: the block, padded to kIoAlign. Nothing else: a slot of a 2 MiB block is one
// 2 MiB-aligned 2 MiB request, exactly what fio issues (a 4 KiB header page per slot measured
// 10-15% slower per read on this VM's virtio disk, docs/kvstore_disk.md).
inline constexpr size_t SlotBytes(size_t block_bytes) { return AlignUp(block_bytes); }

using Key = std::array<char, kKeyBytes>;
Key EncodeKey(BlockHash hash);
// False if `key` is not kKeyBytes long.
bool DecodeKey(std::string_view key, BlockHash* hash);

// What the index says about a block.
struct IndexRecord {
  uint64_t slot = 0;
  BlockHash parent = kRootBlockHash;
  uint64_t length = 0;
  uint64_t checksum = 0;
  uint64_t sequence = 0;  // store order, for the eviction order after a restart
};
std::array<char, kIndexRecordBytes> EncodeIndexRecord(const IndexRecord& record);
bool DecodeIndexRecord(std::string_view value, IndexRecord* record);

// Verifies a block read back from its slot against its index record: the record's length is
// block_bytes and `checksum_read`, the BlockChecksum of the bytes read, is the record's. A slot
// whose write was torn, or that holds another block's bytes, fails the checksum. DataLoss
// naming the check that failed.
absl::Status VerifyBlock(uint64_t checksum_read, size_t block_bytes, const IndexRecord& record);

// The RocksDB options of the index (see docs/kvstore_disk.md for why).
rocksdb::DBOptions MakeIndexDbOptions(const DiskTierOptions& options);
rocksdb::ColumnFamilyOptions MakeIndexFamilyOptions();
rocksdb::WriteOptions MakeWriteOptions(DiskSyncMode sync);

// Size of a transparent huge page on x86-64 and of the usual arm64 configuration.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whether madvise(MADV_HUGEPAGE) memory can get transparent huge pages: the kernel's setting
// (/sys/kernel/mm/transparent_hugepage/enabled) is "always" or "madvise".
bool TransparentHugePagesAvailable();

// A heap buffer aligned to kIoAlign (what O_DIRECT needs), zero-filled. With `huge_pages`, it
// is aligned to and padded to whole kHugePageBytes and advised as huge pages before it is
// first touched, so that where transparent huge pages are available each 2 MiB of it is
// physically contiguous (one segment of an O_DIRECT request).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes, bool huge_pages = false);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  std::span<std::byte> span() const { return {data_, size_}; }

 private:
  std::byte* data_;
  size_t size_;
};

inline bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kIoAlign == 0; }

// The data file: fixed-size slots read and written at byte offsets. With direct_io() every
// part's address and size and every offset must be multiples of kIoAlign (callers ensure it).
// Thread-safe: concurrent calls on disjoint ranges.
class SlotFile {
 public:
  virtual ~SlotFile() = default;
  // Writes `parts` back to back at `offset`; Unavailable on an I/O error or a short write.
  virtual absl::Status Write(uint64_t offset,
                             std::span<const std::span<const std::byte>> parts) = 0;
  // Fills `parts` back to back from `offset`; Unavailable on an I/O error, DataLoss on a short
  // read (the file ends early).
  virtual absl::Status Read(uint64_t offset, std::span<const std::span<std::byte>> parts) const = 0;
  // Makes completed writes durable (fdatasync).
  virtual absl::Status Sync() = 0;
  // Grows or shrinks the file to `bytes` (new space reads as zeros; allocated where the file
  // system can, so later writes do not fail for lack of space).
  virtual absl::Status Resize(uint64_t bytes) = 0;
  virtual absl::StatusOr<uint64_t> Size() const = 0;
  virtual bool direct_io() const = 0;
};

// Opens (creating) `path` with the POSIX API, with O_DIRECT if `want_direct` and the file
// system accepts it, else buffered.
absl::StatusOr<std::unique_ptr<SlotFile>> OpenPosixSlotFile(const std::string& path,
                                                            bool want_direct);
// Opens (creating) `path` through a rocksdb::Env's RandomRWFile (buffered).
absl::StatusOr<std::unique_ptr<SlotFile>> OpenEnvSlotFile(rocksdb::Env* env,
                                                          const std::string& path);

}  // namespace strata::kvstore::disk_internal
