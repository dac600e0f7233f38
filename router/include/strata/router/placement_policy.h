#pragma once
// The extension point behind Placer: a routing policy, registered by name and selected by
// PlacementOptions::policy (`--policy`). The built-in policies (placement.h lists them) are
// registered on first use of the registry; a new one is one class plus one
// RegisterPlacementPolicy call before the Placer is created.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/router/placement.h"

namespace strata::router {

// What the Placer hands a policy for one request. `decode` is never empty: decode-capable
// workers that are not excluded and below max_inflight_per_worker; `prefill` likewise for the
// prefill pool (possibly empty). Pointers are valid for the call only.
struct PlacementContext {
  const PlacementRequest& request;
  const std::vector<const WorkerView*>& decode;
  const std::vector<const WorkerView*>& prefill;
  const std::vector<WorkerMatch>& matches;
  const Placer& placer;  // options, SLO targets, pending prefill ledger, TTFT corrections
};

// A routing policy. Place may be called from many threads at once; a policy guards its own
// state. It returns a placement on one of ctx.decode (and optionally one of ctx.prefill), or
// ResourceExhausted (with kRetryAfterPayload when it can predict one) to shed the request.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual absl::StatusOr<Placement> Place(const PlacementContext& ctx) = 0;
};

using PlacementPolicyFactory =
    std::function<absl::StatusOr<std::unique_ptr<PlacementPolicy>>(const PlacementOptions&)>;

// AlreadyExists when `name` is taken (built-ins included).
absl::Status RegisterPlacementPolicy(const std::string& name, PlacementPolicyFactory factory);
// Registered names, sorted.
std::vector<std::string> PlacementPolicyNames();
// InvalidArgument naming the known policies when `name` is unknown.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> CreatePlacementPolicy(
    const std::string& name, const PlacementOptions& options);

// Helpers for policies.
// Requests outstanding on a worker: the router's own count reacts at once, the heartbeat's
// covers work from other routers.
inline int64_t OutstandingRequests(const WorkerView& w) {
  return std::max<int64_t>(w.inflight, w.load.running + w.load.waiting);
}
// The index's match for a worker (all zero when it holds nothing of the prompt).
WorkerMatch MatchFor(const WorkerView& w, const std::vector<WorkerMatch>& matches);
// A placement on decode worker `d`, prefilling on `p` (nullptr: on `d`).
Placement MakePlacement(const WorkerView& d, const WorkerView* p,
                        const std::vector<WorkerMatch>& matches);

}  // namespace strata::router
