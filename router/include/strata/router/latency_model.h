#pragma once
// Latency models of a worker's engine, fitted from measurements (`strata profile`), used by the
// goodput placement policy to predict TTFT and TPOT and by `strata sim` as the simulated
// workers' ground truth. DistServe-style forms:
//
//   prefill step seconds = a + b * sum(new tokens) + c * sum(new tokens^2)
//                          + d * sum(new tokens * context tokens before them)   (per batch)
//   decode step seconds  = a + b * sum(context tokens) + c * batch           (per step)
//
// plus the costs of moving KV: the prefill->decode transfer and fetches from each KV tier.
// A WorkerProfile is a JSON file (deploy/profiles/*.json); every field is documented in
// docs/configuration.md.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::router {

// Tier names as the profile JSON spells them: "gpu", "host", "disk", "remote".
inline constexpr int kNumTierNames = 4;
const char* TierName(int tier);

// d prices the attention of a step's new tokens to the KV already there (a cached prefix, or
// the earlier chunks of a chunked prefill): with it a 512-token chunk at offset 3,584 costs more
// than the prompt's first 512 tokens, as it does on a real engine. Profiles without "d" have 0.
struct PrefillModel {
  double a = 0, b = 0, c = 0, d = 0;
  // `tokens`: the new (uncached) tokens of each sequence in the batch, no context before them.
  double Seconds(std::span<const int64_t> tokens) const;
  double Seconds(int64_t tokens) const;  // one sequence
  // `context[i]`: tokens already in sequence i's KV before its `tokens[i]` new ones (same
  // length as `tokens`).
  double Seconds(std::span<const int64_t> tokens, std::span<const int64_t> context) const;
  double Seconds(int64_t tokens, int64_t context) const;
  // A prompt of `tokens` new tokens after `context` cached ones, computed in engine steps of
  // at most `chunk` tokens (chunked prefill), each step priced alone.
  double ChunkedSeconds(int64_t tokens, int64_t context, int64_t chunk) const;
};

struct DecodeModel {
  double a = 0, b = 0, c = 0;
  double Seconds(int64_t batch, int64_t total_context_tokens) const {
    return a + b * static_cast<double>(total_context_tokens) + c * static_cast<double>(batch);
  }
};

// Seconds to move `bytes` in one run.
struct LinkModel {
  double bytes_per_second = 1e9;
  double latency_seconds = 0;
  // False when the profile has no measurement of this link (its JSON omits it): the values
  // above are then placeholders, and UnmeasuredLinks() names the link.
  bool measured = true;
  double Seconds(double bytes) const { return latency_seconds + bytes / bytes_per_second; }
};

struct WorkerProfile {
  std::string name;          // e.g. "tiny-llama-cpu"
  std::string hardware;      // where it was measured
  // The workers this profile describes: their served model name ("" = any model) and their
  // device as workers report it (WorkerInfo.device, "<plugin>:<device name>"), matched as a
  // case-insensitive prefix: "cuda:NVIDIA H100" matches "cuda:NVIDIA H100 80GB HBM3".
  // "" = "cpu" (profiles measured with the CPU plugin).
  std::string model;
  std::string device;
  std::string measured_at;   // date
  int block_size = 16;       // tokens per KV block
  int64_t kv_block_bytes = 0;
  int64_t num_kv_blocks = 0;         // G1 capacity per worker
  int64_t max_batch_tokens = 2048;   // the engine's per-step token budget (chunked prefill)
  int64_t max_running = 256;         // sequences per decode batch
  PrefillModel prefill;
  DecodeModel decode;
  LinkModel kv_transfer;                 // prefill worker -> decode worker
  std::array<LinkModel, 4> tier_fetch{};  // indexed by tier: 0 device (unused), 1 host, 2 disk, 3 remote
  double fit_r2_prefill = 0, fit_r2_decode = 0;  // goodness of fit, for the record

  // Seconds to move `blocks` KV blocks prefill -> decode (one run), and to bring them up from
  // `tier` (1 host, 2 disk, 3 remote; tier 0 is free). kv_block_bytes 0 makes both free.
  double TransferSeconds(int64_t blocks) const {
    return blocks <= 0 ? 0 : kv_transfer.Seconds(static_cast<double>(blocks * kv_block_bytes));
  }
  double FetchSeconds(int tier, int64_t blocks) const {
    if (blocks <= 0 || tier <= 0 || tier >= static_cast<int>(tier_fetch.size())) return 0;
    return tier_fetch[tier].Seconds(static_cast<double>(blocks * kv_block_bytes));
  }

  // OK when this profile describes a worker serving `model` on `device` (see model / device;
  // a worker that reports no device matches any profile); else FailedPrecondition saying why.
  absl::Status Matches(const std::string& worker_model, const std::string& worker_device) const;
  // The links this profile has no measurement of ("kv_transfer", "disk", ...), for consumers
  // to say so: they are priced at LinkModel's placeholder (1 GB/s, no latency).
  std::vector<std::string> UnmeasuredLinks() const;

  // JSON: {"name", "hardware", "model", "device", "measured_at", "block_size", "kv_block_bytes", "num_kv_blocks",
  //  "max_batch_tokens", "max_running", "prefill": {a,b,c[,d],r2}, "decode": {a,b,c,r2},
  //  "kv_transfer": {bytes_per_second, latency_seconds},
  //  "tier_fetch": {"host"|"disk"|"remote": {bytes_per_second, latency_seconds}}}.
  // "prefill" and "decode" (with a, b, c) are required, the rest defaults as above.
  // FromJson/Load: InvalidArgument naming the bad field ("profile field 'decode.b': ...").

  static absl::StatusOr<WorkerProfile> FromJson(const std::string& json_text);
  static absl::StatusOr<WorkerProfile> Load(const std::string& path);
  std::string ToJson() const;
};

// The shipped default profile (deploy/profiles/tiny-llama-cpu.json): $STRATA_PROFILE when set,
// else next to the binary (<bin>/../share/strata/profiles/), else in the source tree it was
// built from; "" when none exists.
std::string DefaultProfilePath();

// Where the goodput router looks for profiles by default: $STRATA_PROFILE when set (a file or a
// directory), else the shipped profiles' directory (deploy/profiles/, installed as
// <bin>/../share/strata/profiles/, else the source tree's); "" when none exists.
std::string DefaultProfileDir();

// The profiles at `path`: one for a file, every *.json in a directory (sorted by file name).
// An unreadable or invalid file is an error naming it; a directory with none is NotFound.
absl::StatusOr<std::vector<WorkerProfile>> LoadProfiles(const std::string& path);

// The profile of `profiles` for a worker serving `model` on `device`: the first that names
// the model and matches the device, else the first for any model that matches the device;
// FailedPrecondition listing what there is when none does.
absl::StatusOr<const WorkerProfile*> ChooseProfile(const std::vector<WorkerProfile>& profiles,
                                                   const std::string& model,
                                                   const std::string& device);

// Least-squares fits (normal equations; InvalidArgument when the samples cannot determine the
// coefficients). Coefficients are constrained to >= 0: when the unconstrained fit has a
// negative one, the best fit with some coefficients fixed at 0 is returned instead.
// A prefill sample: per-sequence new tokens of one step, the tokens cached before them
// (empty = none) and its seconds.
struct PrefillSample {
  std::vector<int64_t> tokens;
  double seconds = 0;
  std::vector<int64_t> context;
};
struct DecodeSample {
  int64_t batch = 0;
  int64_t total_context_tokens = 0;
  double seconds = 0;
};
absl::StatusOr<PrefillModel> FitPrefill(std::span<const PrefillSample> samples, double* r2);
absl::StatusOr<DecodeModel> FitDecode(std::span<const DecodeSample> samples, double* r2);

}  // namespace strata::router
