#pragma once
// Helpers shared by the G3 tests and the crash writer: deterministic block contents, a
// rocksdb::Env whose file writes can be made to fail, and damaging a block in the data file.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <fstream>
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

// XORs `mask` into the byte at `offset` of the file at `path` (buffered: a later O_DIRECT read
// of the range sees it, the kernel writes dirty pages back before direct reads).
inline bool FlipByte(const std::string& path, uint64_t offset, uint8_t mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) return false;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  if (!f.get(c)) return false;
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ static_cast<char>(mask)));
  return static_cast<bool>(f.flush());
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

// An Env whose file writes fail on demand (an SSD gone bad, a full disk): what RocksDB and the
// data file then report is what the tier must turn into a clean error.
//   fail_index_writes  every Append to a WritableFile (RocksDB's log and tables) fails
//   fail_data_writes   every Write to a RandomRWFile (the tier's data file) fails
class FailingWritesEnv : public rocksdb::EnvWrapper {
 public:
  explicit FailingWritesEnv(rocksdb::Env* base) : rocksdb::EnvWrapper(base) {}
  static const char* kClassName() { return "FailingWritesEnv"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::Status NewWritableFile(const std::string& name,
                                  std::unique_ptr<rocksdb::WritableFile>* result,
                                  const rocksdb::EnvOptions& options) override {
    rocksdb::Status s = target()->NewWritableFile(name, result, options);
    if (s.ok()) *result = std::make_unique<File>(std::move(*result), &fail_index_writes);
    return s;
  }
  rocksdb::Status NewRandomRWFile(const std::string& name,
                                  std::unique_ptr<rocksdb::RandomRWFile>* result,
                                  const rocksdb::EnvOptions& options) override {
    rocksdb::Status s = target()->NewRandomRWFile(name, result, options);
    if (s.ok()) *result = std::make_unique<RwFile>(std::move(*result), &fail_data_writes);
    return s;
  }

  std::atomic<bool> fail_index_writes{false};
  std::atomic<bool> fail_data_writes{false};

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
  class RwFile : public rocksdb::RandomRWFileWrapper {
   public:
    RwFile(std::unique_ptr<rocksdb::RandomRWFile> base, const std::atomic<bool>* fail)
        : rocksdb::RandomRWFileWrapper(base.get()), base_(std::move(base)), fail_(fail) {}
    rocksdb::Status Write(uint64_t offset, const rocksdb::Slice& data) override {
      if (fail_->load()) return rocksdb::Status::IOError("injected write failure");
      return base_->Write(offset, data);
    }

   private:
    std::unique_ptr<rocksdb::RandomRWFile> base_;
    const std::atomic<bool>* fail_;
  };
};

}  // namespace strata::kvstore::testing
