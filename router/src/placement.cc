#include "strata/router/placement.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "placement_internal.h"
#include "strata/common/registry.h"
#include "strata/router/placement_policy.h"

namespace strata::router {
namespace {

// The policy registry, built-ins added on first use (see strata/common/registry.h).
FactoryRegistry<PlacementPolicyFactory>& GetRegistry() {
  static auto* registry = [] {
    auto* r = new FactoryRegistry<PlacementPolicyFactory>("routing policy");
    internal::RegisterBuiltinPolicies([r](const std::string& name, PlacementPolicyFactory f) {
      r->RegisterOrReplace(name, std::move(f));
    });
    return r;
  }();
  return *registry;
}

bool IsDecodeCapable(const WorkerView& w) {
  return w.role == WorkerRole::kDecode || w.role == WorkerRole::kMixed;
}

}  // namespace

// ---- registry ------------------------------------------------------------------------------

absl::Status RegisterPlacementPolicy(const std::string& name, PlacementPolicyFactory factory) {
  return GetRegistry().Register(name, std::move(factory));
}

std::vector<std::string> PlacementPolicyNames() { return GetRegistry().Names(); }

absl::StatusOr<std::unique_ptr<PlacementPolicy>> CreatePlacementPolicy(
    const std::string& name, const PlacementOptions& options) {
  return GetRegistry().Create(name, options);
}

// ---- helpers -------------------------------------------------------------------------------

WorkerMatch MatchFor(const WorkerView& w, const std::vector<WorkerMatch>& matches) {
  for (const auto& m : matches) {
    if (m.worker == w.index_id) return m;
  }
  WorkerMatch none;
  none.worker = w.index_id;
  return none;
}

Placement MakePlacement(const WorkerView& d, const WorkerView* p,
                        const std::vector<WorkerMatch>& matches) {
  Placement out;
  out.decode_id = d.id;
  out.cached_blocks = MatchFor(d, matches).blocks;
  if (p != nullptr) {
    out.prefill_id = p->id;
    out.prefill_address = p->grpc_address;
  }
  return out;
}

std::optional<double> RetryAfterSeconds(const absl::Status& status) {
  auto payload = status.GetPayload(kRetryAfterPayload);
  double seconds;
  if (!payload.has_value() || !absl::SimpleAtod(std::string(*payload), &seconds)) {
    return std::nullopt;
  }
  return seconds;
}

std::optional<double> MinTtftIfWaited(const absl::Status& status) {
  auto payload = status.GetPayload(kMinTtftPayload);
  double seconds;
  if (!payload.has_value() || !absl::SimpleAtod(std::string(*payload), &seconds)) {
    return std::nullopt;
  }
  return seconds;
}

// ---- SLO targets ---------------------------------------------------------------------------

absl::StatusOr<SloTargets> ParseSloTargets(const std::string& text, SloTargets defaults) {
  SloTargets t = defaults;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits(':', 1));
    double v;
    if (!absl::SimpleAtod(kv.second, &v) || !(v > 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad SLO target '", part, "': want ttft:SECONDS or tpot:SECONDS (> 0)"));
    }
    if (kv.first == "ttft") {
      t.ttft_s = v;
    } else if (kv.first == "tpot") {
      t.tpot_s = v;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown SLO target '", kv.first, "' (ttft, tpot)"));
    }
  }
  return t;
}

absl::StatusOr<std::pair<std::string, SloTargets>> ParseSloClass(const std::string& text,
                                                                 SloTargets defaults) {
  std::pair<std::string, std::string> kv = absl::StrSplit(text, absl::MaxSplits('=', 1));
  if (kv.first.empty() || kv.second.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad SLO class '", text, "': want NAME=ttft:SECONDS,tpot:SECONDS"));
  }
  auto targets = ParseSloTargets(kv.second, defaults);
  if (!targets.ok()) return targets.status();
  return std::make_pair(kv.first, *targets);
}

// ---- Placer --------------------------------------------------------------------------------

Placer::Placer(PlacementOptions options, std::unique_ptr<PlacementPolicy> policy)
    : options_(std::move(options)), policy_(std::move(policy)) {}
Placer::~Placer() = default;

absl::StatusOr<std::unique_ptr<Placer>> Placer::Create(const PlacementOptions& options) {
  if (!(options.slo.ttft_s > 0) || !(options.slo.tpot_s > 0)) {
    return absl::InvalidArgumentError("SLO targets must be > 0");
  }
  if (options.overlap_weight < 0) return absl::InvalidArgumentError("overlap_weight must be >= 0");
  auto policy = CreatePlacementPolicy(options.policy, options);
  if (!policy.ok()) return policy.status();
  return std::unique_ptr<Placer>(new Placer(options, std::move(*policy)));
}

absl::StatusOr<Placement> Placer::Place(const std::vector<WorkerView>& workers,
                                        const std::vector<WorkerMatch>& matches,
                                        int32_t prompt_tokens, int block_size,
                                        const std::vector<std::string>& exclude) {
  PlacementRequest r;
  r.prompt_tokens = prompt_tokens;
  r.block_size = block_size;
  r.exclude = exclude;
  return Place(workers, matches, r);
}

absl::StatusOr<Placement> Placer::Place(const std::vector<WorkerView>& workers,
                                        const std::vector<WorkerMatch>& matches,
                                        const PlacementRequest& request) {
  std::vector<const WorkerView*> decode, prefill;
  bool any_decode = false;
  for (const WorkerView& w : workers) {
    const auto& ex = request.exclude;
    if (std::find(ex.begin(), ex.end(), w.id) != ex.end()) continue;
    if (w.load.stalled) continue;  // its engine is hung: requests there would never finish
    const bool full = OutstandingRequests(w) >= options_.max_inflight_per_worker;
    if (IsDecodeCapable(w)) {
      any_decode = true;
      if (!full) decode.push_back(&w);
    } else if (w.role == WorkerRole::kPrefill && !full && !request.local_prefill) {
      prefill.push_back(&w);
    }
  }
  if (!any_decode) return absl::UnavailableError("no decode worker is available");
  if (decode.empty()) {
    return absl::ResourceExhaustedError("every worker is at its limit of outstanding requests");
  }
  PlacementContext ctx{request, decode, prefill, matches, *this};
  absl::MutexLock decide(&decide_mu_);
  auto placed = policy_->Place(ctx);
  if (placed.ok() && options_.track_pending_prefill && placed->prefill_tokens > 0) {
    const std::string& at = placed->prefill_id.empty() ? placed->decode_id : placed->prefill_id;
    absl::MutexLock lock(&mu_);
    pending_[at] += placed->prefill_tokens;
  }
  return placed;
}

void Placer::OnFirstToken(const Placement& p, double observed_ttft_s) {
  const std::string& at = p.prefill_id.empty() ? p.decode_id : p.prefill_id;
  absl::MutexLock lock(&mu_);
  if (options_.track_pending_prefill && p.prefill_tokens > 0) {
    auto it = pending_.find(at);
    if (it != pending_.end() && (it->second -= p.prefill_tokens) <= 0) pending_.erase(it);
  }
  if (observed_ttft_s < 0 || p.predicted_ttft_s <= 0) return;
  // Clamp one observation's ratio so a single stall cannot swing the factor by orders.
  const double ratio = std::clamp(observed_ttft_s / p.predicted_ttft_s, 0.1, 10.0);
  auto [it, inserted] = correction_.try_emplace(at, ratio);
  if (!inserted) it->second += options_.correction_alpha * (ratio - it->second);
}

std::map<std::string, double> Placer::TtftCorrections() const {
  absl::MutexLock lock(&mu_);
  return std::map<std::string, double>(correction_.begin(), correction_.end());
}

double Placer::TtftCorrection(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = correction_.find(worker_id);
  return it == correction_.end() ? 1.0 : it->second;
}

int64_t Placer::PendingPrefillTokens(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(worker_id);
  return it == pending_.end() ? 0 : it->second;
}

void Placer::LiveState(const std::vector<const WorkerView*>& workers,
                       std::vector<double>* correction, std::vector<int64_t>* pending) const {
  correction->assign(workers.size(), 1.0);
  pending->assign(workers.size(), 0);
  absl::MutexLock lock(&mu_);
  if (correction_.empty() && pending_.empty()) return;  // nothing observed yet: no hashing
  for (size_t i = 0; i < workers.size(); ++i) {
    const std::string& id = workers[i]->id;
    if (auto it = correction_.find(id); it != correction_.end()) (*correction)[i] = it->second;
    if (auto it = pending_.find(id); it != pending_.end()) (*pending)[i] = it->second;
  }
}

SloTargets Placer::TargetsFor(const std::string& slo_class) const {
  auto it = options_.slo_classes.find(slo_class);
  return it == options_.slo_classes.end() ? options_.slo : it->second;
}

}  // namespace strata::router
