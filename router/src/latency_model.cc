#include "strata/router/latency_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/file_util.h"
#include "strata/common/status_macros.h"

namespace strata::router {
namespace {

using Json = nlohmann::json;

constexpr std::array<const char*, kNumTierNames> kTierNames = {"gpu", "host", "disk", "remote"};

// ---- least squares ------------------------------------------------------------------------

// Linear least squares over up to kFeatures features through the normal equations. Columns are scaled to unit
// max magnitude first so that a column of squared token counts (~1e8) and the constant column
// (1) do not make the system numerically singular; a pivot that vanishes relative to its
// column means the samples cannot tell the coefficients apart.
// Unused trailing features are 0 in every row (and get coefficient 0).
constexpr int kFeatures = 4;
using Row = std::array<double, kFeatures>;

// The augmented normal matrix [X'X | X'y] of the features divided by `scale`.
void NormalEquations(const std::vector<Row>& x, const std::vector<double>& y, const Row& scale,
                     double m[kFeatures][kFeatures + 1]) {
  for (int r = 0; r < kFeatures; ++r) {
    for (int c = 0; c <= kFeatures; ++c) m[r][c] = 0;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    for (int r = 0; r < kFeatures; ++r) {
      const double xr = x[i][r] / scale[r];
      for (int c = 0; c < kFeatures; ++c) m[r][c] += xr * x[i][c] / scale[c];
      m[r][kFeatures] += xr * y[i];
    }
  }
}

// `features`: how many leading features the caller uses (the rest must be 0). A feature that
// is 0 in every sample cannot be fitted and gets coefficient 0, unless it is the constant.
// `active`: bit j set = feature j is fitted; the others are fixed at 0.
absl::StatusOr<Row> SolveLeastSquares(const std::vector<Row>& x, const std::vector<double>& y,
                                      const char* what, int features, unsigned active) {
  if (x.size() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " fit needs at least 3 samples, got ", x.size()));
  }
  Row scale{};
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(y[i]) || y[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " sample ", i, " has an invalid time ", y[i]));
    }
    for (int j = 0; j < kFeatures; ++j) scale[j] = std::max(scale[j], std::abs(x[i][j]));
  }
  for (int j = 0; j < kFeatures; ++j) {
    if (scale[j] > 0) continue;
    if (j < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " fit: feature ", j, " is zero in every sample"));
    }
    active &= ~(1u << j);  // an optional feature the samples never exercise
    scale[j] = 1;
  }
  for (int j = features; j < kFeatures; ++j) active &= ~(1u << j);
  double m[kFeatures][kFeatures + 1];
  NormalEquations(x, y, scale, m);
  double diag_max = 0;
  for (int j = 0; j < kFeatures; ++j) diag_max = std::max(diag_max, m[j][j]);
  for (int j = 0; j < kFeatures; ++j) {
    if (active & (1u << j)) continue;
    for (int c = 0; c <= kFeatures; ++c) m[j][c] = 0;
    for (int r = 0; r < kFeatures; ++r) m[r][j] = 0;
    m[j][j] = diag_max;  // beta_j = 0
  }
  for (int col = 0; col < kFeatures; ++col) {
    int pivot = col;
    for (int r = col + 1; r < kFeatures; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    if (std::abs(m[pivot][col]) <= 1e-12 * diag_max) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " fit is degenerate: the samples do not vary enough to determine all the "
                "coefficients (vary the token counts / batch sizes)"));
    }
    for (int c = 0; c <= kFeatures; ++c) std::swap(m[col][c], m[pivot][c]);
    for (int r = 0; r < kFeatures; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int c = col; c <= kFeatures; ++c) m[r][c] -= f * m[col][c];
    }
  }
  Row beta;
  for (int j = 0; j < kFeatures; ++j) beta[j] = m[j][kFeatures] / m[j][j] / scale[j];
  return beta;
}

double Predict(const Row& x, const Row& beta) {
  double v = 0;
  for (int j = 0; j < kFeatures; ++j) v += beta[j] * x[j];
  return v;
}

double SumSquaredResiduals(const std::vector<Row>& x, const std::vector<double>& y,
                           const Row& beta) {
  double ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = y[i] - Predict(x[i], beta);
    ss += e * e;
  }
  return ss;
}

bool NonNegative(const Row& beta) {
  return std::all_of(beta.begin(), beta.end(), [](double v) { return v >= 0; });
}

// Least squares with every coefficient >= 0 (a time never shrinks with more work, and a
// negative intercept predicts negative times for small steps). With this few features the exact
// answer is the best non-negative unconstrained fit over the subsets of features, so try them.
absl::StatusOr<Row> SolveNonNegative(const std::vector<Row>& x, const std::vector<double>& y,
                                     const char* what, int features) {
  const unsigned all = (1u << features) - 1;
  STRATA_ASSIGN_OR_RETURN(Row full, SolveLeastSquares(x, y, what, features, all));
  if (NonNegative(full)) return full;
  std::optional<Row> best;
  double best_ss = 0;
  for (unsigned mask = 1; mask < all; ++mask) {
    auto beta = SolveLeastSquares(x, y, what, features, mask);
    if (!beta.ok() || !NonNegative(*beta)) continue;
    const double ss = SumSquaredResiduals(x, y, *beta);
    if (!best.has_value() || ss < best_ss) best = *beta, best_ss = ss;
  }
  if (!best.has_value()) return Row{};
  return *best;
}

double RSquared(const std::vector<Row>& x, const std::vector<double>& y, const Row& beta) {
  double mean = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double pred = Predict(x[i], beta);
    ss_res += (y[i] - pred) * (y[i] - pred);
    ss_tot += (y[i] - mean) * (y[i] - mean);
  }
  if (ss_tot <= 0) return ss_res <= 1e-24 ? 1.0 : 0.0;
  return 1.0 - ss_res / ss_tot;
}

// ---- JSON ----------------------------------------------------------------------------------

absl::Status FieldError(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("profile field '", field, "': ", problem));
}

// Reads an optional number at obj[key] into *out (left unchanged when absent).
absl::Status ReadNumber(const Json& obj, const std::string& prefix, const char* key, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::OkStatus();
  if (!it->is_number()) return FieldError(prefix + key, "expected a number");
  *out = it->get<double>();
  if (!std::isfinite(*out)) return FieldError(prefix + key, "must be finite");
  return absl::OkStatus();
}

absl::Status ReadInt(const Json& obj, const char* key, int64_t min, int64_t* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::OkStatus();
  if (!it->is_number_integer()) return FieldError(key, "expected an integer");
  *out = it->get<int64_t>();
  if (*out < min) return FieldError(key, absl::StrCat("must be >= ", min));
  return absl::OkStatus();
}

absl::Status ReadString(const Json& obj, const char* key, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::OkStatus();
  if (!it->is_string()) return FieldError(key, "expected a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// A required object holding a, b, c (and optionally r2).
absl::Status ReadModel(const Json& root, const char* key, double* a, double* b, double* c,
                       double* r2) {
  auto it = root.find(key);
  if (it == root.end()) return FieldError(key, "missing (an object with a, b, c)");
  if (!it->is_object()) return FieldError(key, "expected an object with a, b, c");
  const std::string prefix = absl::StrCat(key, ".");
  for (const char* k : {"a", "b", "c"}) {
    if (!it->contains(k)) return FieldError(prefix + k, "missing");
  }
  STRATA_RETURN_IF_ERROR(ReadNumber(*it, prefix, "a", a));
  STRATA_RETURN_IF_ERROR(ReadNumber(*it, prefix, "b", b));
  STRATA_RETURN_IF_ERROR(ReadNumber(*it, prefix, "c", c));
  return ReadNumber(*it, prefix, "r2", r2);
}

absl::Status ReadLink(const Json& obj, const std::string& field, LinkModel* link) {
  if (!obj.is_object()) return FieldError(field, "expected an object");
  const std::string prefix = field + ".";
  STRATA_RETURN_IF_ERROR(ReadNumber(obj, prefix, "bytes_per_second", &link->bytes_per_second));
  STRATA_RETURN_IF_ERROR(ReadNumber(obj, prefix, "latency_seconds", &link->latency_seconds));
  if (link->bytes_per_second <= 0) return FieldError(prefix + "bytes_per_second", "must be > 0");
  if (link->latency_seconds < 0) return FieldError(prefix + "latency_seconds", "must be >= 0");
  return absl::OkStatus();
}

absl::Status ReadLinks(const Json& root, WorkerProfile* p) {
  // A link the JSON omits is unmeasured until read.
  p->kv_transfer.measured = false;
  for (LinkModel& l : p->tier_fetch) l.measured = false;
  p->tier_fetch[0].measured = true;  // G1 costs nothing
  if (auto it = root.find("kv_transfer"); it != root.end()) {
    STRATA_RETURN_IF_ERROR(ReadLink(*it, "kv_transfer", &p->kv_transfer));
    p->kv_transfer.measured = true;
  }
  auto it = root.find("tier_fetch");
  if (it == root.end()) return absl::OkStatus();
  if (!it->is_object()) return FieldError("tier_fetch", "expected an object keyed by tier name");
  for (const auto& [name, link] : it->items()) {
    const auto* pos = std::find(kTierNames.begin(), kTierNames.end(), name);
    if (pos == kTierNames.end()) {
      return FieldError("tier_fetch." + name, "unknown tier (gpu, host, disk, remote)");
    }
    LinkModel& l = p->tier_fetch[pos - kTierNames.begin()];
    STRATA_RETURN_IF_ERROR(ReadLink(link, "tier_fetch." + name, &l));
    l.measured = true;
  }
  return absl::OkStatus();
}

absl::Status ReadSizes(const Json& root, WorkerProfile* p) {
  int64_t block_size = p->block_size;
  STRATA_RETURN_IF_ERROR(ReadInt(root, "block_size", 1, &block_size));
  p->block_size = static_cast<int>(block_size);
  STRATA_RETURN_IF_ERROR(ReadInt(root, "kv_block_bytes", 0, &p->kv_block_bytes));
  STRATA_RETURN_IF_ERROR(ReadInt(root, "num_kv_blocks", 0, &p->num_kv_blocks));
  STRATA_RETURN_IF_ERROR(ReadInt(root, "max_batch_tokens", 1, &p->max_batch_tokens));
  return ReadInt(root, "max_running", 1, &p->max_running);
}

Json LinkJson(const LinkModel& l) {
  return Json{{"bytes_per_second", l.bytes_per_second}, {"latency_seconds", l.latency_seconds}};
}

// $STRATA_PROFILE when set, else "".
std::string ProfileFromEnv() {
  const char* env = std::getenv("STRATA_PROFILE");
  return env != nullptr ? env : "";
}

// The first of the shipped profile directories (next to the binary, then the source tree's)
// that holds `file` ("" = that is a directory); "" when none does.
std::string FindShipped(const std::string& file) {
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share/strata/profiles");
#ifdef STRATA_PROFILE_SOURCE_DIR
  candidates.push_back(std::filesystem::path(STRATA_PROFILE_SOURCE_DIR));
#endif
  for (const auto& dir : candidates) {
    const bool found = file.empty() ? std::filesystem::is_directory(dir, ec)
                                    : std::filesystem::exists(dir / file, ec);
    if (found) return (file.empty() ? dir : dir / file).string();
  }
  return "";
}

}  // namespace

std::string DefaultProfilePath() {
  const std::string env = ProfileFromEnv();
  return !env.empty() ? env : FindShipped("tiny-llama-cpu.json");
}

std::string DefaultProfileDir() {
  const std::string env = ProfileFromEnv();
  return !env.empty() ? env : FindShipped("");
}

absl::StatusOr<std::vector<WorkerProfile>> LoadProfiles(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    STRATA_ASSIGN_OR_RETURN(WorkerProfile p, WorkerProfile::Load(path));
    return std::vector<WorkerProfile>{std::move(p)};
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  if (ec) return absl::UnavailableError(absl::StrCat(path, ": ", ec.message()));
  if (files.empty()) return absl::NotFoundError(absl::StrCat(path, ": no *.json profiles"));
  std::sort(files.begin(), files.end());
  std::vector<WorkerProfile> out;
  for (const std::string& f : files) {
    STRATA_ASSIGN_OR_RETURN(WorkerProfile p, WorkerProfile::Load(f));
    out.push_back(std::move(p));
  }
  return out;
}

absl::Status WorkerProfile::Matches(const std::string& worker_model,
                                    const std::string& worker_device) const {
  if (!model.empty() && model != worker_model) {
    return absl::FailedPreconditionError(absl::StrCat("profile '", name, "' is for model '", model,
                                                      "', the worker serves '", worker_model, "'"));
  }
  const std::string want = absl::AsciiStrToLower(device.empty() ? "cpu" : device);
  if (!worker_device.empty() && !absl::StartsWith(absl::AsciiStrToLower(worker_device), want)) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile '", name, "' was measured on '", device.empty() ? "cpu" : device,
                     "', the worker runs on '", worker_device, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const WorkerProfile*> ChooseProfile(const std::vector<WorkerProfile>& profiles,
                                                   const std::string& model,
                                                   const std::string& device) {
  for (bool any_model : {false, true}) {
    for (const WorkerProfile& p : profiles) {
      if (p.model.empty() == any_model && p.Matches(model, device).ok()) return &p;
    }
  }
  std::vector<std::string> have;
  for (const WorkerProfile& p : profiles) {
    have.push_back(absl::StrCat(p.name, " (model ", p.model.empty() ? "any" : p.model,
                                ", device ", p.device.empty() ? "cpu" : p.device, ")"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no goodput profile for model '", model, "' on device '", device, "' (have: ",
      have.empty() ? "none" : absl::StrJoin(have, "; "),
      "): measure one with `strata profile` and give it to the router with --profile, or "
      "route with another --policy"));
}

const char* TierName(int tier) {
  return tier >= 0 && tier < kNumTierNames ? kTierNames[tier] : "unknown";
}

double PrefillModel::Seconds(std::span<const int64_t> tokens) const {
  double sum = 0, sum_sq = 0;
  for (int64_t t : tokens) {
    sum += static_cast<double>(t);
    sum_sq += static_cast<double>(t) * static_cast<double>(t);
  }
  return a + b * sum + c * sum_sq;
}

double PrefillModel::Seconds(int64_t tokens) const {
  const double t = static_cast<double>(tokens);
  return a + b * t + c * t * t;
}

double PrefillModel::Seconds(std::span<const int64_t> tokens,
                             std::span<const int64_t> context) const {
  double cross = 0;
  for (size_t i = 0; i < tokens.size() && i < context.size(); ++i) {
    cross += static_cast<double>(tokens[i]) * static_cast<double>(context[i]);
  }
  return Seconds(tokens) + d * cross;
}

double PrefillModel::Seconds(int64_t tokens, int64_t context) const {
  return Seconds(tokens) + d * static_cast<double>(tokens) * static_cast<double>(context);
}

double PrefillModel::ChunkedSeconds(int64_t tokens, int64_t context, int64_t chunk) const {
  chunk = std::max<int64_t>(1, chunk);
  double s = 0;
  for (int64_t done = 0; done < tokens; done += chunk) {
    s += Seconds(std::min(chunk, tokens - done), context + done);
  }
  return s;
}

absl::StatusOr<PrefillModel> FitPrefill(std::span<const PrefillSample> samples, double* r2) {
  std::vector<Row> x;
  std::vector<double> y;
  for (const PrefillSample& s : samples) {
    if (!s.context.empty() && s.context.size() != s.tokens.size()) {
      return absl::InvalidArgumentError("prefill sample with context of a different length");
    }
    double sum = 0, sum_sq = 0, cross = 0;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int64_t t = s.tokens[i], ctx = s.context.empty() ? 0 : s.context[i];
      if (t < 0 || ctx < 0) {
        return absl::InvalidArgumentError("prefill sample with a negative token count");
      }
      sum += static_cast<double>(t);
      sum_sq += static_cast<double>(t) * static_cast<double>(t);
      cross += static_cast<double>(t) * static_cast<double>(ctx);
    }
    x.push_back({1.0, sum, sum_sq, cross});
    y.push_back(s.seconds);
  }
  STRATA_ASSIGN_OR_RETURN(Row beta, SolveNonNegative(x, y, "prefill", 4));
  if (r2 != nullptr) *r2 = RSquared(x, y, beta);
  return PrefillModel{beta[0], beta[1], beta[2], beta[3]};
}

absl::StatusOr<DecodeModel> FitDecode(std::span<const DecodeSample> samples, double* r2) {
  std::vector<Row> x;
  std::vector<double> y;
  for (const DecodeSample& s : samples) {
    if (s.batch < 0 || s.total_context_tokens < 0) {
      return absl::InvalidArgumentError("decode sample with a negative batch or context");
    }
    x.push_back(
        {1.0, static_cast<double>(s.total_context_tokens), static_cast<double>(s.batch), 0.0});
    y.push_back(s.seconds);
  }
  STRATA_ASSIGN_OR_RETURN(Row beta, SolveNonNegative(x, y, "decode", 3));
  if (r2 != nullptr) *r2 = RSquared(x, y, beta);
  return DecodeModel{beta[0], beta[1], beta[2]};
}

absl::StatusOr<WorkerProfile> WorkerProfile::FromJson(const std::string& json_text) {
  Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("profile is not valid JSON");
  if (!root.is_object()) return absl::InvalidArgumentError("profile must be a JSON object");
  WorkerProfile p;
  STRATA_RETURN_IF_ERROR(ReadString(root, "name", &p.name));
  STRATA_RETURN_IF_ERROR(ReadString(root, "hardware", &p.hardware));
  STRATA_RETURN_IF_ERROR(ReadString(root, "model", &p.model));
  STRATA_RETURN_IF_ERROR(ReadString(root, "device", &p.device));
  STRATA_RETURN_IF_ERROR(ReadString(root, "measured_at", &p.measured_at));
  STRATA_RETURN_IF_ERROR(ReadSizes(root, &p));
  STRATA_RETURN_IF_ERROR(
      ReadModel(root, "prefill", &p.prefill.a, &p.prefill.b, &p.prefill.c, &p.fit_r2_prefill));
  STRATA_RETURN_IF_ERROR(ReadNumber(root.at("prefill"), "prefill.", "d", &p.prefill.d));  // optional
  STRATA_RETURN_IF_ERROR(
      ReadModel(root, "decode", &p.decode.a, &p.decode.b, &p.decode.c, &p.fit_r2_decode));
  STRATA_RETURN_IF_ERROR(ReadLinks(root, &p));
  return p;
}

absl::StatusOr<WorkerProfile> WorkerProfile::Load(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto p = FromJson(text);
  if (!p.ok()) {
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  }
  return p;
}

std::vector<std::string> WorkerProfile::UnmeasuredLinks() const {
  std::vector<std::string> out;
  if (!kv_transfer.measured) out.push_back("kv_transfer");
  for (int t = 1; t < kNumTierNames; ++t) {
    if (!tier_fetch[t].measured) out.push_back(kTierNames[t]);
  }
  return out;
}

std::string WorkerProfile::ToJson() const {
  Json tiers = Json::object();
  for (int t = 1; t < kNumTierNames; ++t) {
    if (tier_fetch[t].measured) tiers[kTierNames[t]] = LinkJson(tier_fetch[t]);
  }
  Json root = {
      {"name", name},
      {"hardware", hardware},
      {"model", model},
      {"device", device.empty() ? std::string("cpu") : device},
      {"measured_at", measured_at},
      {"block_size", block_size},
      {"kv_block_bytes", kv_block_bytes},
      {"num_kv_blocks", num_kv_blocks},
      {"max_batch_tokens", max_batch_tokens},
      {"max_running", max_running},
      {"prefill",
       {{"a", prefill.a}, {"b", prefill.b}, {"c", prefill.c}, {"d", prefill.d},
        {"r2", fit_r2_prefill}}},
      {"decode", {{"a", decode.a}, {"b", decode.b}, {"c", decode.c}, {"r2", fit_r2_decode}}},
      {"tier_fetch", tiers},
  };
  if (kv_transfer.measured) root["kv_transfer"] = LinkJson(kv_transfer);
  return root.dump(2) + "\n";
}

}  // namespace strata::router
