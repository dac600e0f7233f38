#pragma once
// The G3 on-disk formats (keys, values, meta records) and the RocksDB options, shared by the
// tier and its tests. Every integer is encoded little-endian except keys, which are big-endian
// so that RocksDB's bytewise order is numeric order.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "rocksdb/options.h"
#include "strata/kvstore/disk_tier.h"

namespace strata::kvstore::disk_internal {

inline constexpr uint32_t kValueMagic = 0x3356'4b53;  // "SKV3" read as little-endian bytes
inline constexpr uint16_t kValueVersion = 1;
// magic u32, version u16, header bytes u16, hash u64, parent u64, length u64, checksum u64.
inline constexpr size_t kHeaderBytes = 40;
inline constexpr size_t kKeyBytes = 8;
inline constexpr size_t kMetaBytes = 16;  // parent u64, store sequence u64
inline constexpr char kMetaFamily[] = "meta";

using Key = std::array<char, kKeyBytes>;
Key EncodeKey(BlockHash hash);
// False if `key` is not kKeyBytes long.
bool DecodeKey(std::string_view key, BlockHash* hash);

struct ValueHeader {
  BlockHash hash = 0;
  BlockHash parent = kRootBlockHash;
  uint64_t length = 0;
  uint64_t checksum = 0;
};
using EncodedHeader = std::array<char, kHeaderBytes>;
EncodedHeader EncodeHeader(const ValueHeader& header);

// Verifies a stored value (header fields, expected hash, length == dst.size(), checksum of the
// payload) and copies the payload into `dst`. DataLoss naming the first check that failed;
// `dst` is untouched then.
absl::Status DecodeValue(std::string_view value, BlockHash expected_hash, std::span<std::byte> dst);

struct MetaRecord {
  BlockHash parent = kRootBlockHash;
  uint64_t sequence = 0;  // store order, for the eviction order after a restart
};
std::array<char, kMetaBytes> EncodeMeta(const MetaRecord& record);
bool DecodeMeta(std::string_view value, MetaRecord* record);

// The RocksDB options for a tier (see docs/kvstore_disk.md for why).
// `direct_io`: options.direct_io and the file system takes O_DIRECT (SupportsDirectIo).
rocksdb::DBOptions MakeDbOptions(const DiskTierOptions& options, bool direct_io);
// Whether files under options.path can be opened with O_DIRECT through the tier's Env
// (creates the directory; false on tmpfs and in-memory Envs that refuse it).
bool SupportsDirectIo(const DiskTierOptions& options);
rocksdb::ColumnFamilyOptions MakeDataFamilyOptions(const DiskTierOptions& options);
rocksdb::ColumnFamilyOptions MakeMetaFamilyOptions(const DiskTierOptions& options);
rocksdb::WriteOptions MakeWriteOptions(DiskSyncMode sync);

}  // namespace strata::kvstore::disk_internal
