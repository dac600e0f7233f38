# strata::kvstore_disk — G3: KV blocks in an O_DIRECT slot file on a local SSD, indexed in RocksDB
# (disk_tier.h). Debian's librocksdb-dev ships a pkg-config file (and a CMake package that drags
# in gflags, TBB, ...); pkg-config is the lighter way in.
pkg_check_modules(ROCKSDB REQUIRED IMPORTED_TARGET rocksdb)
strata_cc_library(NAME kvstore_disk
  SRCS src/disk/disk_tier.cc src/disk/disk_tier_open.cc src/disk/disk_tier_file.cc
       src/disk/disk_tier_format.cc
  DEPS strata::kvstore PkgConfig::ROCKSDB absl::flat_hash_map absl::strings
       absl::synchronization)
