#pragma once
// Where a request runs: a decode (or mixed) worker, and optionally a prefill worker that
// computes the prompt and writes its KV into the decode worker's blocks.
//
// Policies (one flag, `--policy`; registered by name, see placement_policy.h):
//   "round-robin", "least-loaded": ignore the KV caches; always disaggregate when prefill
//       workers exist.
//   "kv-aware" (the default): the decode worker with the fewest outstanding requests, near-ties
//       to the longest cached prefix; remote prefill only when the uncached part is at least
//       min_remote_prefill_tokens.
//   "kv-cost": Dynamo-style; per worker cost = overlap_weight x prompt blocks it would have to
//       prefill + its active KV blocks; the cheapest wins (prefill pool likewise by its queue).
//   "goodput": predicts TTFT and TPOT of every candidate (prefill worker or none, decode
//       worker) from the profile's latency models, the KV index's per-tier matches and live
//       load; picks the fastest-TTFT candidate that meets both SLOs (ties: lower TPOT),
//       prefilling on the decode worker when that is predicted better (conditional
//       disaggregation), and rejects with ResourceExhausted + a retry-after hint when no
//       candidate can meet the request's SLO (admission control), plus kMinTtftPayload when
//       waiting for a decode slot could (the router's AdmissionQueue, when enabled, queues it).
//
// The Placer works over plain worker views (worker_view.h), with no gRPC or protobuf types, so
// `strata sim` runs it as the router does; it is deterministic given its inputs, options and the
// sequence of calls made on it.
// Thread-safety: every method is thread-safe.
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "strata/router/kv_index.h"
#include "strata/router/latency_model.h"
#include "strata/router/worker_view.h"

namespace strata::router {

// A request's service-level objectives, in seconds.
struct SloTargets {
  double ttft_s = 2.0;
  double tpot_s = 0.2;
};

// Parses "ttft:0.5,tpot:0.05" (either may be omitted; it keeps `defaults`' value).
// InvalidArgument naming the bad part.
absl::StatusOr<SloTargets> ParseSloTargets(const std::string& text, SloTargets defaults);
// Parses "NAME=ttft:0.5,tpot:0.05" into (NAME, targets).
absl::StatusOr<std::pair<std::string, SloTargets>> ParseSloClass(const std::string& text,
                                                                 SloTargets defaults);

struct PlacementOptions {
  std::string policy = "kv-aware";
  // Remote prefill only when at least this many prompt tokens are not cached on the decode
  // worker (kv-aware; the other policies always disaggregate when prefill workers exist).
  int min_remote_prefill_tokens = 16;
  // Requests outstanding on one worker beyond which the router sheds load (429).
  int max_inflight_per_worker = 256;
  // kv-cost: weight of the blocks a worker would have to prefill against its active blocks.
  double overlap_weight = 1.0;

  // goodput: the workers' latency models, the default SLO and named SLO classes.
  WorkerProfile profile;
  SloTargets slo;
  std::map<std::string, SloTargets> slo_classes;
  // Output length assumed when a request states none (spreads a local prefill's stall of the
  // decode batch over the tokens it decodes).
  int64_t assumed_output_tokens = 256;
  // The router's own ledger of prefill tokens it placed and has not seen start (heartbeats lag
  // a burst); the caller must then report OnFirstToken. Off for callers whose WorkerLoad is
  // exact (the simulator).
  bool track_pending_prefill = false;
  // Weight of a new observation in the per-worker TTFT correction (EMA of observed/predicted).
  double correction_alpha = 0.2;

  // Resolved by the router at startup (Router::Create), not read by the Placer: a profile file
  // to load into `profile` ("" = DefaultProfilePath(), required by goodput), and
  // "NAME=ttft:S,tpot:S" specs (--slo-class) parsed into `slo_classes`.
  std::string profile_path;
  std::vector<std::string> slo_class_specs;
};

// What placement needs to know about one request.
struct PlacementRequest {
  int32_t prompt_tokens = 0;
  int block_size = 16;
  std::vector<std::string> exclude;  // workers that just failed this request
  std::string slo_class;             // "" = the default targets; unknown names too
  int64_t max_tokens = 0;            // 0 = unknown (assumed_output_tokens)
  // Seconds since the request arrived (it waited in the admission queue, or a worker failed
  // it): goodput measures its TTFT target from the arrival, so this much of it is spent.
  double waited_s = 0;
  // Prefill on the decode worker (no prefill worker is a candidate): a stream resumed after
  // its worker failed, whose generated tokens count as output only there.
  bool local_prefill = false;
};

struct Placement {
  std::string decode_id;
  std::string prefill_id;       // empty: prefill on the decode worker
  std::string prefill_address;  // its Worker service address
  int32_t cached_blocks = 0;    // prefix blocks the decode worker holds (index view)
  // goodput only (0 otherwise): the prediction, for online correction and the record.
  double predicted_ttft_s = 0;
  double predicted_tpot_s = 0;
  int64_t prefill_tokens = 0;  // tokens the chosen prefill location must compute
};

// The status payload (absl::Status::SetPayload) of a goodput rejection: the seconds after which
// a retry is predicted to meet the SLO, as decimal text. The router answers 429 + Retry-After.
inline constexpr char kRetryAfterPayload[] = "type.strata.dev/retry-after-seconds";
std::optional<double> RetryAfterSeconds(const absl::Status& status);
// The payload of a goodput rejection that waiting could turn into a placement: no candidate
// meets the SLO now, but one meets the TTFT target and fails only on TPOT because of its
// current decode batch (a batch of one would meet it). Its value is that candidate's predicted
// TTFT (the least such), as decimal text: the TTFT once a decode slot frees, which the
// admission queue (admission_queue.h) subtracts from the deadline to get the slack.
inline constexpr char kMinTtftPayload[] = "type.strata.dev/min-ttft-if-waited-seconds";
std::optional<double> MinTtftIfWaited(const absl::Status& status);

class PlacementPolicy;

class Placer {
 public:
  // InvalidArgument for an unknown policy name or bad options.
  static absl::StatusOr<std::unique_ptr<Placer>> Create(const PlacementOptions& options);
  ~Placer();

  // Unavailable when no decode-capable worker is registered; ResourceExhausted when every
  // candidate is at max_inflight_per_worker or (goodput) none can meet the SLO. Thread-safe;
  // concurrent calls are decided one at a time.
  absl::StatusOr<Placement> Place(const std::vector<WorkerView>& workers,
                                  const std::vector<WorkerMatch>& matches,
                                  const PlacementRequest& request);
  // The original form: default SLO class, unknown output length.
  absl::StatusOr<Placement> Place(const std::vector<WorkerView>& workers,
                                  const std::vector<WorkerMatch>& matches, int32_t prompt_tokens,
                                  int block_size, const std::vector<std::string>& exclude);

  // The request placed as `p` produced its first token (or failed) after `observed_ttft_s`
  // (< 0: no observation, just release its pending prefill tokens). Feeds the TTFT correction.
  void OnFirstToken(const Placement& p, double observed_ttft_s);
  // Per worker id: EMA of observed / predicted TTFT (1 = the model is right). Sorted by id.
  std::map<std::string, double> TtftCorrections() const;
  // Targets for a class name (unknown or empty: the default).
  SloTargets TargetsFor(const std::string& slo_class) const;
  const PlacementOptions& options() const { return options_; }

  // Live state the policies read (besides the request and the workers).
  int64_t PendingPrefillTokens(const std::string& worker_id) const;
  double TtftCorrection(const std::string& worker_id) const;
  // Both for every worker in `workers` (same order), under one lock; a policy that reads them
  // for many candidates per request calls this once.
  void LiveState(const std::vector<const WorkerView*>& workers, std::vector<double>* correction,
                 std::vector<int64_t>* pending) const;

 private:
  Placer(PlacementOptions options, std::unique_ptr<PlacementPolicy> policy);

  PlacementOptions options_;
  std::unique_ptr<PlacementPolicy> policy_;
  // Serializes decisions: a decision reads the pending-prefill ledger and adds its own prompt
  // to it, so two concurrent ones must not both see the ledger without the other's prompt.
  absl::Mutex decide_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, double> correction_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::router
