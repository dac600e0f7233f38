// Writing .safetensors files in the layout the reference library produces: ordered header JSON
// padded with spaces to an 8-byte boundary, then the tensors back to back.
#include <bit>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/engine/safetensors.h"

namespace strata {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

absl::Status SafetensorsWriter::Add(const std::string& name, DType dtype,
                                    std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  if (name == "__metadata__") {
    return absl::InvalidArgumentError("safetensors: tensor name __metadata__ is reserved");
  }
  for (const Entry& e : entries_) {
    if (e.name == name) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", name, " added twice"));
    }
  }
  uint64_t expected = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected)) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor ", name, " has an invalid shape"));
    }
  }
  if (expected != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", name, " has ",
                                                   bytes.size(), " bytes, shape and dtype need ",
                                                   expected));
  }
  entries_.push_back({name, dtype, std::move(shape), {bytes.begin(), bytes.end()}});
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::AddF32(const std::string& name, std::vector<int64_t> shape,
                                       std::span<const float> v) {
  return Add(name, DType::kF32, std::move(shape),
             {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()});
}

void SafetensorsWriter::SetMetadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::string SafetensorsWriter::Serialize() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", DTypeName(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &header_len, sizeof(header_len));  // little-endian host (static_assert)
  out.reserve(8 + text.size() + offset);
  out += text;
  for (const Entry& e : entries_) out.append(e.bytes.begin(), e.bytes.end());
  return out;
}

absl::Status SafetensorsWriter::WriteFile(const std::string& path) const {
  return WriteStringToFile(path, Serialize());
}

}  // namespace strata
