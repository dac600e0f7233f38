// Memory-mapped safetensors reading with full header validation, and dtype conversion.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data section; offsets are
// relative to the data section's start.
#include "strata/engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/half.h"
#include "strata/common/status_macros.h"

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

const DTypeEntry* FindDType(const std::string& name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

absl::Status FileError(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status TensorError(const std::string& path, const std::string& name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", name, ": ", what));
}

// A JSON value as a non-negative integer that fits uint64; nullopt otherwise.
std::optional<uint64_t> AsCount(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

absl::Status ParseShape(const std::string& path, const std::string& name, const json& shape,
                        TensorInfo& info, uint64_t& numel) {
  if (!shape.is_array()) return TensorError(path, name, "shape must be a list");
  numel = 1;
  for (const json& dim : shape) {
    const std::optional<uint64_t> d = AsCount(dim);
    if (!d || *d > static_cast<uint64_t>(INT64_MAX)) {
      return TensorError(path, name,
                         "shape has a dimension that is not a non-negative integer: " + dim.dump());
    }
    if (__builtin_mul_overflow(numel, *d, &numel) || numel > static_cast<uint64_t>(INT64_MAX)) {
      return TensorError(path, name, "shape " + shape.dump() + " overflows");
    }
    info.shape.push_back(static_cast<int64_t>(*d));
  }
  return absl::OkStatus();
}

// Parses one tensor entry; offsets are checked against the data section's size.
absl::Status ParseTensor(const std::string& path, const std::string& name, const json& entry,
                         const uint8_t* data, uint64_t data_size, TensorInfo& info) {
  if (!entry.is_object()) return TensorError(path, name, "entry must be an object");
  auto dtype = entry.find("dtype");
  auto shape = entry.find("shape");
  auto offsets = entry.find("data_offsets");
  if (dtype == entry.end()) return TensorError(path, name, "missing \"dtype\"");
  if (shape == entry.end()) return TensorError(path, name, "missing \"shape\"");
  if (offsets == entry.end()) return TensorError(path, name, "missing \"data_offsets\"");
  const DTypeEntry* dt = dtype->is_string() ? FindDType(dtype->get<std::string>()) : nullptr;
  if (dt == nullptr) return TensorError(path, name, "unknown dtype " + dtype->dump());
  info.name = name;
  info.file = path;
  info.dtype = dt->dtype;
  uint64_t numel = 0;
  STRATA_RETURN_IF_ERROR(ParseShape(path, name, *shape, info, numel));
  if (!offsets->is_array() || offsets->size() != 2 || !AsCount((*offsets)[0]) ||
      !AsCount((*offsets)[1])) {
    return TensorError(path, name, "data_offsets must be two non-negative integers");
  }
  const uint64_t begin = *AsCount((*offsets)[0]);
  const uint64_t end = *AsCount((*offsets)[1]);
  if (end < begin) return TensorError(path, name, "data_offsets end is before begin");
  if (end > data_size) {
    return TensorError(path, name,
                       absl::StrCat("data_offsets [", begin, ", ", end,
                                    ") run past the data section of ", data_size, " bytes"));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, dt->size, &nbytes) || nbytes != end - begin) {
    return TensorError(path, name,
                       absl::StrCat("data_offsets span ", end - begin,
                                    " bytes but dtype and shape need ", numel, " x ", dt->size));
  }
  info.data = data + begin;
  info.nbytes = static_cast<size_t>(nbytes);
  return absl::OkStatus();
}

absl::Status ParseMetadata(const std::string& path, const json& meta,
                           std::map<std::string, std::string>& out) {
  if (!meta.is_object()) return FileError(path, "__metadata__ must be an object");
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    if (!it->is_string()) {
      return FileError(path, "__metadata__ value for \"" + it.key() + "\" must be a string");
    }
    out[it.key()] = it->get<std::string>();
  }
  return absl::OkStatus();
}

// The tensors must tile [0, data_size) exactly: no overlap, no hole, nothing after the last.
absl::Status CheckTiling(const std::string& path, const std::map<std::string, TensorInfo>& tensors,
                         const uint8_t* data, uint64_t data_size) {
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
  for (const auto& [name, t] : tensors) {
    const uint64_t begin = static_cast<uint64_t>(t.data - data);
    spans.emplace_back(begin, begin + t.nbytes, &name);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto& [begin, end, name] : spans) {
    if (begin < covered) {
      return TensorError(path, *name, "data overlaps tensor " + *previous);
    }
    if (begin > covered) {
      return TensorError(path, *name,
                         absl::StrCat("data starts at ", begin, ", leaving a hole at ", covered));
    }
    covered = end;
    previous = name;
  }
  if (covered != data_size) {
    const std::string last = previous != nullptr ? *previous : "(none)";
    return TensorError(path, last,
                       absl::StrCat("data section has ", data_size - covered,
                                    " trailing bytes after the last tensor"));
  }
  return absl::OkStatus();
}

// Parses the header JSON, reporting a duplicated tensor name (which nlohmann would silently
// collapse) as an error.
absl::StatusOr<json> ParseHeaderJson(const std::string& path, std::string_view text) {
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    return FileError(path, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) return TensorError(path, duplicate, "name appears twice in the header");
  if (!header.is_object()) return FileError(path, "header must be a JSON object");
  return header;
}

}  // namespace

const char* DTypeName(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  // O_NONBLOCK: a FIFO planted at the path must not hang the open; regular files ignore it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return FileError(path, "not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    close(fd);
    return FileError(path, absl::StrCat("file is ", size,
                                        " bytes, shorter than the 8-byte "
                                        "header length"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (map == MAP_FAILED) return absl::ErrnoToStatus(mmap_errno, absl::StrCat(path, ": mmap"));
  file->map_ = map;
  file->map_size_ = size;
  STRATA_RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

absl::Status SafetensorsFile::ParseHeader() {
  const auto* base = static_cast<const uint8_t*>(map_);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, sizeof(header_len));
  if (header_len > kMaxHeaderBytes) {
    return FileError(path_, absl::StrCat("header length ", header_len, " exceeds the limit of ",
                                         kMaxHeaderBytes, " bytes"));
  }
  if (header_len > map_size_ - 8) {
    return FileError(path_, absl::StrCat("header length ", header_len, " exceeds the ",
                                         map_size_ - 8, " bytes after the length field"));
  }
  const std::string_view text(reinterpret_cast<const char*>(base + 8), header_len);
  STRATA_ASSIGN_OR_RETURN(json header, ParseHeaderJson(path_, text));
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = map_size_ - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      STRATA_RETURN_IF_ERROR(ParseMetadata(path_, *it, metadata_));
      continue;
    }
    TensorInfo info;
    STRATA_RETURN_IF_ERROR(ParseTensor(path_, it.key(), *it, data, data_size, info));
    tensors_.emplace(it.key(), std::move(info));
  }
  return CheckTiling(path_, tensors_, data, data_size);
}

namespace {

absl::Status NotFloat(const TensorInfo& t) {
  return TensorError(t.file, t.name,
                     absl::StrCat("has dtype ", DTypeName(t.dtype), ", not F32, F16 or BF16"));
}

// Reads element i of a floating tensor as float32 (data may be unaligned).
template <typename T>
T LoadAt(const TensorInfo& t, int64_t i) {
  T v;
  std::memcpy(&v, t.data + i * sizeof(T), sizeof(T));
  return v;
}

template <typename Out, typename FromF32>
absl::Status ConvertVia(const TensorInfo& t, Out* dst, FromF32 from_f32) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) dst[i] = from_f32(LoadAt<float>(t, i));
      return absl::OkStatus();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = from_f32(F16ToFloat(LoadAt<uint16_t>(t, i)));
      return absl::OkStatus();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = from_f32(Bf16ToFloat(LoadAt<uint16_t>(t, i)));
      return absl::OkStatus();
    default:
      return NotFloat(t);
  }
}

}  // namespace

absl::Status ConvertToF32(const TensorInfo& t, float* dst) {
  if (t.dtype == DType::kF32) {
    std::memcpy(dst, t.data, t.nbytes);
    return absl::OkStatus();
  }
  return ConvertVia(t, dst, [](float f) { return f; });
}

absl::Status ConvertToBF16(const TensorInfo& t, uint16_t* dst) {
  if (t.dtype == DType::kBF16) {
    std::memcpy(dst, t.data, t.nbytes);
    return absl::OkStatus();
  }
  return ConvertVia(t, dst, FloatToBf16);
}

absl::Status ConvertToF16(const TensorInfo& t, uint16_t* dst) {
  if (t.dtype == DType::kF16) {
    std::memcpy(dst, t.data, t.nbytes);
    return absl::OkStatus();
  }
  return ConvertVia(t, dst, FloatToF16);
}

}  // namespace strata
