// G3 encodings and the index's RocksDB options (disk_tier_internal.h).
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "disk_tier_internal.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"

namespace strata::kvstore::disk_internal {
namespace {

void PutLe(char* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetLe(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}

}  // namespace

Key EncodeKey(BlockHash hash) {
  Key key;
  for (size_t i = 0; i < kKeyBytes; ++i) {
    key[i] = static_cast<char>((hash >> (8 * (kKeyBytes - 1 - i))) & 0xff);
  }
  return key;
}

bool DecodeKey(std::string_view key, BlockHash* hash) {
  if (key.size() != kKeyBytes) return false;
  uint64_t v = 0;
  for (char c : key) v = (v << 8) | static_cast<uint8_t>(c);
  *hash = v;
  return true;
}

absl::Status VerifyBlock(uint64_t checksum_read, size_t block_bytes, const IndexRecord& record) {
  if (record.length != block_bytes) {
    return absl::DataLossError(
        absl::StrCat("disk block: length ", record.length, " indexed, ", block_bytes, " expected"));
  }
  if (checksum_read != record.checksum) return absl::DataLossError("disk block: checksum mismatch");
  return absl::OkStatus();
}

std::array<char, kIndexRecordBytes> EncodeIndexRecord(const IndexRecord& record) {
  std::array<char, kIndexRecordBytes> out{};
  PutLe(&out[0], record.slot, 8);
  PutLe(&out[8], record.parent, 8);
  PutLe(&out[16], record.length, 8);
  PutLe(&out[24], record.checksum, 8);
  PutLe(&out[32], record.sequence, 8);
  return out;
}

bool DecodeIndexRecord(std::string_view value, IndexRecord* record) {
  if (value.size() != kIndexRecordBytes) return false;
  const char* v = value.data();
  record->slot = GetLe(v, 8);
  record->parent = GetLe(v + 8, 8);
  record->length = GetLe(v + 16, 8);
  record->checksum = GetLe(v + 24, 8);
  record->sequence = GetLe(v + 32, 8);
  return true;
}

rocksdb::DBOptions MakeIndexDbOptions(const DiskTierOptions& options) {
  rocksdb::DBOptions db;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  // A torn log tail (process crash mid-append) is cut at the last whole record.
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.max_background_jobs = 1;  // 40-byte records: flushes and compactions are small
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.keep_log_file_num = 2;
  if (options.env != nullptr) db.env = options.env;
  return db;
}

rocksdb::ColumnFamilyOptions MakeIndexFamilyOptions() {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = 16 << 20;  // ~200k index entries
  cf.max_write_buffer_number = 2;
  cf.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  // Debian's portable RocksDB has only a software CRC32C; XXH3 is several times faster.
  table.checksum = rocksdb::kXXH3;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return cf;
}

rocksdb::WriteOptions MakeWriteOptions(DiskSyncMode sync) {
  rocksdb::WriteOptions w;
  w.disableWAL = sync == DiskSyncMode::kNoWal;
  w.sync = sync == DiskSyncMode::kWalSync;
  return w;
}

bool TransparentHugePagesAvailable() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  if (!std::getline(in, setting)) return false;  // no THP in this kernel
  return setting.find("[never]") == std::string::npos;
}

AlignedBuffer::AlignedBuffer(size_t bytes, bool huge_pages) : size_(bytes) {
  const size_t align = huge_pages ? kHugePageBytes : kIoAlign;
  const size_t allocated = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  data_ = static_cast<std::byte*>(std::aligned_alloc(align, allocated));
  if (data_ == nullptr) std::abort();  // out of memory: nothing sensible to do
  // Advice only: where it is refused the buffer works on ordinary pages.
  if (huge_pages) ::madvise(data_, allocated, MADV_HUGEPAGE);
  std::memset(data_, 0, allocated);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace strata::kvstore::disk_internal
