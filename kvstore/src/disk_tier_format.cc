// G3 encodings and RocksDB options (disk_tier_internal.h).
#include <algorithm>
#include <cstring>

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

size_t DefaultWriteBuffer(const DiskTierOptions& options) {
  if (options.write_buffer_bytes > 0) return options.write_buffer_bytes;
  return std::max<size_t>(size_t{64} << 20, 16 * options.block_bytes);
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

EncodedHeader EncodeHeader(const ValueHeader& header) {
  EncodedHeader out{};
  PutLe(&out[0], kValueMagic, 4);
  PutLe(&out[4], kValueVersion, 2);
  PutLe(&out[6], kHeaderBytes, 2);
  PutLe(&out[8], header.hash, 8);
  PutLe(&out[16], header.parent, 8);
  PutLe(&out[24], header.length, 8);
  PutLe(&out[32], header.checksum, 8);
  return out;
}

absl::Status DecodeValue(std::string_view value, BlockHash expected_hash,
                         std::span<std::byte> dst) {
  if (value.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("disk block: value of ", value.size(), " bytes"));
  }
  const char* h = value.data();
  if (GetLe(h, 4) != kValueMagic || GetLe(h + 4, 2) != kValueVersion ||
      GetLe(h + 6, 2) != kHeaderBytes) {
    return absl::DataLossError("disk block: bad magic/version");
  }
  if (GetLe(h + 8, 8) != expected_hash) {
    return absl::DataLossError("disk block: header hash does not match its key");
  }
  const uint64_t length = GetLe(h + 24, 8);
  if (length != dst.size() || value.size() - kHeaderBytes != length) {
    return absl::DataLossError(absl::StrCat("disk block: length ", length, " stored, ",
                                            value.size() - kHeaderBytes, " present, ", dst.size(),
                                            " expected"));
  }
  std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(h + kHeaderBytes), length);
  if (BlockChecksum(payload) != GetLe(h + 32, 8)) {
    return absl::DataLossError("disk block: checksum mismatch");
  }
  std::memcpy(dst.data(), payload.data(), length);
  return absl::OkStatus();
}

std::array<char, kMetaBytes> EncodeMeta(const MetaRecord& record) {
  std::array<char, kMetaBytes> out{};
  PutLe(&out[0], record.parent, 8);
  PutLe(&out[8], record.sequence, 8);
  return out;
}

bool DecodeMeta(std::string_view value, MetaRecord* record) {
  if (value.size() != kMetaBytes) return false;
  record->parent = GetLe(value.data(), 8);
  record->sequence = GetLe(value.data() + 8, 8);
  return true;
}

rocksdb::DBOptions MakeDbOptions(const DiskTierOptions& options, bool direct_io) {
  rocksdb::DBOptions db;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  // Both families flush together, so the persisted state is one point in time for both
  // (matters under kNoWal, where the memtables are all there is).
  db.atomic_flush = true;
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.max_background_jobs = 2;
  db.bytes_per_sync = 1 << 20;  // write back blob/SST files steadily, not in bursts
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  db.keep_log_file_num = 2;
  if (options.env != nullptr) db.env = options.env;
  // One O_DIRECT read per block instead of the kernel's 128 KiB readahead steps through the
  // page cache; flushes stream past the page cache too (docs/kvstore_disk.md, measured).
  db.use_direct_reads = direct_io;
  db.use_direct_io_for_flush_and_compaction = direct_io;
  return db;
}

rocksdb::ColumnFamilyOptions MakeDataFamilyOptions(const DiskTierOptions& options) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = DefaultWriteBuffer(options);
  cf.max_write_buffer_number = 3;
  cf.compression = rocksdb::kNoCompression;  // KV blocks are dense floats: incompressible
  cf.bottommost_compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.checksum = rocksdb::kXXH3;  // Debian's portable build has only software CRC32C
  if (options.layout == DiskValueLayout::kBlobFiles) {
    cf.enable_blob_files = true;
    cf.min_blob_size = options.block_bytes / 2;  // every value (header + block) goes to a blob
    cf.blob_compression_type = rocksdb::kNoCompression;
    cf.blob_file_size = std::max<uint64_t>(uint64_t{256} << 20, 32 * options.block_bytes);
    cf.enable_blob_garbage_collection = true;
    cf.blob_garbage_collection_age_cutoff = 0.25;
    table.block_size = 4 << 10;  // the LSM holds only keys and blob references
  } else {
    table.block_size = 256 << 10;
  }
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return cf;
}

rocksdb::ColumnFamilyOptions MakeMetaFamilyOptions(const DiskTierOptions& options) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = 8 << 20;
  cf.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return cf;
}

bool SupportsDirectIo(const DiskTierOptions& options) {
  rocksdb::Env* env = options.env != nullptr ? options.env : rocksdb::Env::Default();
  if (!env->CreateDirIfMissing(options.path).ok()) return false;
  const std::string probe = options.path + "/DIRECT_IO_PROBE";
  rocksdb::EnvOptions env_options;
  env_options.use_direct_writes = true;
  std::unique_ptr<rocksdb::WritableFile> file;
  const bool ok = env->NewWritableFile(probe, &file, env_options).ok();
  if (file != nullptr) file->Close().PermitUncheckedError();
  env->DeleteFile(probe).PermitUncheckedError();
  return ok;
}

rocksdb::WriteOptions MakeWriteOptions(DiskSyncMode sync) {
  rocksdb::WriteOptions w;
  w.disableWAL = sync == DiskSyncMode::kNoWal;
  w.sync = sync == DiskSyncMode::kWalSync;
  return w;
}

}  // namespace strata::kvstore::disk_internal
