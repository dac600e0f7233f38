// Weight sources for Model::Load: a safetensors checkpoint, and deterministic random weights.
#include "strata/engine/weight_source.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/common/half.h"
#include "strata/common/json_limits.h"
#include "strata/common/status_macros.h"

namespace strata {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// splitmix64's output function: a bijective 64-bit mix.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// FNV-1a: a fixed hash of the tensor name (never std::hash, which may differ across builds).
uint64_t NameHash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// Fills elements [begin, end) of a tensor: value i = offset + (2u - 1) * half_width, u uniform in
// [0, 1) from the top 24 bits of Mix(key + (i + 1) * golden).
template <typename Out, typename FromF32>
void FillRange(uint64_t key, float offset, float half_width, int64_t begin, int64_t end, Out* dst,
               FromF32 from_f32) {
  constexpr float kScale = 1.0f / 16777216.0f;  // 2^-24
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t bits = Mix(key + static_cast<uint64_t>(i + 1) * kGolden);
    const float u = static_cast<float>(bits >> 40) * kScale;
    dst[i] = from_f32(offset + (2.0f * u - 1.0f) * half_width);
  }
}

// Splits [0, n) over up to one thread per core, at least 64Ki elements each (a thread costs
// ~20 us; 64Ki elements take ~0.2 ms); chunk boundaries do not change any value. A model at
// real scale is mostly tensors of a few million elements (one expert's projection), so this is
// what makes generating 30B values take seconds rather than minutes.
template <typename Out, typename FromF32>
void Fill(uint64_t key, float offset, float half_width, int64_t n, Out* dst, FromF32 from_f32) {
  constexpr int64_t kPerThread = int64_t{1} << 16;
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::clamp<int64_t>(n / kPerThread, 1, cores);
  if (threads <= 1) {
    FillRange(key, offset, half_width, 0, n, dst, from_f32);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      FillRange(key, offset, half_width, n * t / threads, n * (t + 1) / threads, dst, from_f32);
    });
  }
  for (auto& th : pool) th.join();
}

absl::StatusOr<int64_t> Numel(const std::string& origin, const std::string& name,
                              std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 40) / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": tensor ", name, " has an invalid shape"));
    }
    n *= d;
  }
  return n;
}

}  // namespace

absl::Status CheckpointWeights::Read(const std::string& name, std::span<const int64_t> shape,
                                     DType dtype, void* dst) const {
  STRATA_ASSIGN_OR_RETURN(const TensorInfo* t, checkpoint_.GetWithShape(name, shape));
  switch (dtype) {
    case DType::kF32:
      return ConvertToF32(*t, static_cast<float*>(dst));
    case DType::kBF16:
      return ConvertToBF16(*t, static_cast<uint16_t*>(dst));
    case DType::kF16:
      return ConvertToF16(*t, static_cast<uint16_t*>(dst));
    default:
      return absl::InvalidArgumentError(absl::StrCat(checkpoint_.dir(), ": tensor ", name,
                                                     " cannot be read as ", DTypeName(dtype)));
  }
}

std::string RandomWeights::origin() const { return absl::StrCat("random(seed=", seed_, ")"); }

bool RandomWeights::Has(const std::string& name) const {
  return !(tied_ && name == "lm_head.weight");
}

absl::Status RandomWeights::Read(const std::string& name, std::span<const int64_t> shape,
                                 DType dtype, void* dst) const {
  if (!Has(name)) {
    return absl::NotFoundError(absl::StrCat(origin(), ": missing tensor ", name));
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t n, Numel(origin(), name, shape));
  const uint64_t key = Mix(seed_ * kGolden ^ NameHash(name));
  const float offset = absl::EndsWith(name, "norm.weight") ? 1.0f : 0.0f;
  const float half_width = stddev_ * std::sqrt(3.0f);  // uniform [-a, a) has std a / sqrt(3)
  switch (dtype) {
    case DType::kF32:
      Fill(key, offset, half_width, n, static_cast<float*>(dst), [](float f) { return f; });
      return absl::OkStatus();
    case DType::kBF16:
      Fill(key, offset, half_width, n, static_cast<uint16_t*>(dst), FloatToBf16);
      return absl::OkStatus();
    case DType::kF16:
      Fill(key, offset, half_width, n, static_cast<uint16_t*>(dst), FloatToF16);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(origin(), ": tensor ", name, " cannot be read as ", DTypeName(dtype)));
  }
}

absl::StatusOr<RandomWeightsSpec> ReadRandomWeightsSpec(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kRandomWeightsFile);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a small JSON file"));
  }
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  const auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  if (absl::Status depth = CheckJsonDepth(text, 4); !depth.ok()) return bad(depth.message());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("must be a JSON object {\"seed\": N, \"stddev\": S}");
  RandomWeightsSpec spec;
  if (auto it = j.find("seed"); it != j.end()) {
    if (!it->is_number_unsigned()) return bad("seed must be a non-negative integer");
    spec.seed = it->get<uint64_t>();
  }
  if (auto it = j.find("stddev"); it != j.end()) {
    if (!it->is_number()) return bad("stddev must be a number");
    const double s = it->get<double>();
    if (!(s > 0.0 && s <= 1.0)) return bad("stddev must be in (0, 1]");
    spec.stddev = static_cast<float>(s);
  }
  return spec;
}

absl::Status WriteRandomWeightsSpec(const std::string& dir, const RandomWeightsSpec& spec) {
  const nlohmann::json j = {{"seed", spec.seed}, {"stddev", spec.stddev}};
  return WriteStringToFile(absl::StrCat(dir, "/", kRandomWeightsFile), j.dump(2) + "\n");
}

}  // namespace strata
