#pragma once
// Helpers shared by the G3 tests and the crash writer: deterministic block contents and a
// RocksDB Env whose file writes can be made to fail.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rocksdb/env.h"
#include "strata/common/block_hash.h"

namespace strata::kvstore::testing {

// splitmix64: a fixed, well-mixed function of its input.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The bytes of block `hash`: a pure function of the hash, so any process can check them.
inline void FillBlock(BlockHash hash, std::span<std::byte> out) {
  uint64_t state = hash;
  for (size_t i = 0; i < out.size(); i += 8) {
    state = Mix64(state);
    for (size_t b = 0; b < 8 && i + b < out.size(); ++b) {
      out[i + b] = static_cast<std::byte>((state >> (8 * b)) & 0xff);
    }
  }
}

inline std::vector<std::byte> MakeBlock(BlockHash hash, size_t bytes) {
  std::vector<std::byte> block(bytes);
  FillBlock(hash, block);
  return block;
}

// The crash writer's i-th block: the high 32 bits carry a tag, the low 32 bits i + 1, so a
// reader recovers i from any hash it finds.
inline constexpr uint64_t kCrashTag = 0x5354'4b56ULL;
inline BlockHash CrashBlockHash(uint64_t i) { return (kCrashTag << 32) | (i + 1); }
inline bool CrashBlockIndex(BlockHash hash, uint64_t* i) {
  if ((hash >> 32) != kCrashTag || (hash & 0xffffffffULL) == 0) return false;
  *i = (hash & 0xffffffffULL) - 1;
  return true;
}

// An Env whose files fail every Append while `fail_writes` is set (an SSD gone bad, a full
// disk): what RocksDB then reports is what the tier must turn into a clean error.
class FailingWritesEnv : public rocksdb::EnvWrapper {
 public:
  explicit FailingWritesEnv(rocksdb::Env* base) : rocksdb::EnvWrapper(base) {}
  static const char* kClassName() { return "FailingWritesEnv"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::Status NewWritableFile(const std::string& name,
                                  std::unique_ptr<rocksdb::WritableFile>* result,
                                  const rocksdb::EnvOptions& options) override {
    rocksdb::Status s = target()->NewWritableFile(name, result, options);
    if (s.ok()) *result = std::make_unique<File>(std::move(*result), &fail_writes);
    return s;
  }

  std::atomic<bool> fail_writes{false};

 private:
  class File : public rocksdb::WritableFileWrapper {
   public:
    File(std::unique_ptr<rocksdb::WritableFile> base, const std::atomic<bool>* fail)
        : rocksdb::WritableFileWrapper(base.get()), base_(std::move(base)), fail_(fail) {}
    rocksdb::Status Append(const rocksdb::Slice& data) override {
      if (fail_->load()) return rocksdb::Status::IOError("injected write failure");
      return base_->Append(data);
    }
    rocksdb::Status Append(const rocksdb::Slice& data,
                           const rocksdb::DataVerificationInfo& info) override {
      if (fail_->load()) return rocksdb::Status::IOError("injected write failure");
      return base_->Append(data, info);
    }

   private:
    std::unique_ptr<rocksdb::WritableFile> base_;
    const std::atomic<bool>* fail_;
  };
};

}  // namespace strata::kvstore::testing
