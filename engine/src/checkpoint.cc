// A checkpoint directory: one model.safetensors, or shards named by model.safetensors.index.json.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/common/status_macros.h"
#include "strata/engine/safetensors.h"

namespace strata {
namespace {

using nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

// A shard must be a plain file name inside the checkpoint directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// weight_map of the index: tensor name -> shard file name.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path,
                                                                 const std::string& text) {
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object"));
  }
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": key \"weight_map\" must be an object"));
  }
  std::map<std::string, std::string> out;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string() || !IsPlainFileName(it->get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor ", it.key(), " maps to ", it->dump(),
                       ", which is not a file name in the checkpoint directory"));
    }
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  auto checkpoint = std::unique_ptr<Checkpoint>(new Checkpoint());
  checkpoint->dir_ = dir;
  const std::string index_path = absl::StrCat(dir, "/", kIndexFile);
  absl::StatusOr<std::string> index_text = ReadFileToString(index_path);
  if (index_text.ok()) {
    STRATA_RETURN_IF_ERROR(checkpoint->OpenSharded(index_path, *index_text));
    return checkpoint;
  }
  if (!absl::IsNotFound(index_text.status())) return index_text.status();
  const std::string single_path = absl::StrCat(dir, "/", kSingleFile);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(single_path);
  if (absl::IsNotFound(file.status())) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no ", kSingleFile, " or ", kIndexFile, " in the directory"));
  }
  if (!file.ok()) return file.status();
  for (const auto& [name, info] : (*file)->tensors()) checkpoint->index_[name] = &info;
  checkpoint->files_.push_back(*std::move(file));
  return checkpoint;
}

absl::Status Checkpoint::OpenSharded(const std::string& index_path, const std::string& text) {
  STRATA_ASSIGN_OR_RETURN(auto weight_map, ReadWeightMap(index_path, text));
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& [name, shard] : weight_map) {
    if (shards.count(shard) == 0) {
      absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
          SafetensorsFile::Open(absl::StrCat(dir_, "/", shard));
      if (!file.ok()) {
        return absl::Status(file.status().code(),
                            absl::StrCat(index_path, " lists shard ", shard, " (for tensor ", name,
                                         "): ", file.status().message()));
      }
      shards[shard] = file->get();
      files_.push_back(*std::move(file));
    }
    const TensorInfo* info = shards[shard]->Find(name);
    if (info == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": tensor ", name, " is mapped to ", shard, ", which does not hold it"));
    }
    index_[name] = info;
  }
  return absl::OkStatus();
}

bool Checkpoint::Has(const std::string& name) const { return index_.count(name) > 0; }

absl::StatusOr<const TensorInfo*> Checkpoint::Get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor ", name));
  }
  return it->second;
}

absl::StatusOr<const TensorInfo*> Checkpoint::GetWithShape(const std::string& name,
                                                           std::span<const int64_t> shape) const {
  STRATA_ASSIGN_OR_RETURN(const TensorInfo* info, Get(name));
  if (!std::equal(info->shape.begin(), info->shape.end(), shape.begin(), shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        info->file, ": tensor ", name, " has shape [", absl::StrJoin(info->shape, ", "),
        "], expected [", absl::StrJoin(shape, ", "), "]"));
  }
  return info;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, info] : index_) names.push_back(name);
  return names;
}

}  // namespace strata
