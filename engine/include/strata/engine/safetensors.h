#pragma once
// Safetensors checkpoints: memory-mapped reading (single file or sharded through
// model.safetensors.index.json) and writing.
//
// Reading validates everything before use, as the reference `safetensors` library does: header
// length within the file (and at most 100 MB), JSON an object without duplicate names, every
// tensor's dtype known, shape non-negative without overflow, data_offsets in range and of exactly
// dtype size * numel bytes, and the tensors tiling the data section without overlap, holes or
// trailing bytes. Any violation is an InvalidArgument error naming the file and the tensor;
// nothing crashes on a hostile file. Tensor data stays mapped (read-only) for the life of the
// SafetensorsFile / Checkpoint; `data` may be unaligned. Thread-compatible: const methods may be
// called concurrently.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

const char* DTypeName(DType dtype);  // safetensors spelling: "F32", "BF16", ...
size_t DTypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  std::string file;  // the file that holds it, for error messages
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* Find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  absl::Status ParseHeader();  // fills tensors_ / metadata_ from the mapping

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: the shards listed in DIR/model.safetensors.index.json
// when it exists (each shard opened once and checked to hold the tensors the index maps to it;
// only the tensors in weight_map are visible), else DIR/model.safetensors. NotFound when neither
// exists or a listed shard is missing.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool Has(const std::string& name) const;
  // NotFound "DIR: missing tensor NAME" when absent.
  absl::StatusOr<const TensorInfo*> Get(const std::string& name) const;
  // Get + shape check ("DIR/FILE: tensor NAME has shape [a, b], expected [c, d]").
  absl::StatusOr<const TensorInfo*> GetWithShape(const std::string& name,
                                                 std::span<const int64_t> shape) const;
  std::vector<std::string> TensorNames() const;

 private:
  Checkpoint() = default;
  absl::Status OpenSharded(const std::string& index_path, const std::string& index_text);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

// Converts a floating tensor (F32/F16/BF16) into float32 / bfloat16 / float16 at `dst`
// (numel elements; rounding to nearest even). Other source dtypes are InvalidArgument naming the
// file and the tensor.
absl::Status ConvertToF32(const TensorInfo& t, float* dst);
absl::Status ConvertToBF16(const TensorInfo& t, uint16_t* dst);
absl::Status ConvertToF16(const TensorInfo& t, uint16_t* dst);

// Builds a .safetensors file in memory and writes it (header padded with spaces to a multiple of
// 8 bytes, tensors in insertion order, optional __metadata__). The Python `safetensors` package
// loads the result.
class SafetensorsWriter {
 public:
  // InvalidArgument for a duplicate or reserved name, a negative dimension, or bytes.size() !=
  // numel * DTypeSize(dtype); the writer is unchanged then.
  absl::Status Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                   std::span<const uint8_t> bytes);
  absl::Status AddF32(const std::string& name, std::vector<int64_t> shape,
                      std::span<const float> v);
  void SetMetadata(const std::string& key, const std::string& value);
  std::string Serialize() const;
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace strata
