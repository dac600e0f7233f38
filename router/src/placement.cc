#include "strata/router/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace strata::router {
namespace {

int64_t Outstanding(const WorkerView& w) {
  // The router's own count reacts at once; the heartbeat's covers work from other routers.
  return std::max<int64_t>(w.inflight, w.load.running() + w.load.waiting());
}

int32_t Matched(const WorkerView& w, const std::vector<WorkerMatch>& matches) {
  for (const auto& m : matches) {
    if (m.worker == w.index_id) return m.blocks;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Placer>> Placer::Create(const PlacementOptions& options) {
  if (options.policy != "round-robin" && options.policy != "least-loaded" &&
      options.policy != "kv-aware") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown routing policy '", options.policy, "' (round-robin, least-loaded, kv-aware)"));
  }
  return std::unique_ptr<Placer>(new Placer(options));
}

const WorkerView* Placer::Pick(const std::vector<const WorkerView*>& c,
                               const std::vector<WorkerMatch>& matches,
                               std::atomic<uint64_t>& rr) {
  if (c.empty()) return nullptr;
  if (options_.policy == "round-robin") return c[rr.fetch_add(1) % c.size()];
  const WorkerView* best = nullptr;
  for (const WorkerView* w : c) {
    if (best == nullptr) {
      best = w;
      continue;
    }
    const int64_t lw = Outstanding(*w), lb = Outstanding(*best);
    if (options_.policy == "kv-aware" && std::abs(lw - lb) <= 1) {
      // Near-tie on load: the longer cached prefix wins, then the lighter load.
      const int32_t mw = Matched(*w, matches), mb = Matched(*best, matches);
      if (mw != mb) {
        if (mw > mb) best = w;
        continue;
      }
    }
    if (lw < lb) best = w;
  }
  return best;
}

absl::StatusOr<Placement> Placer::Place(const std::vector<WorkerView>& workers,
                                        const std::vector<WorkerMatch>& matches,
                                        int32_t prompt_tokens, int block_size,
                                        const std::vector<std::string>& exclude) {
  std::vector<const WorkerView*> decode, prefill;
  bool any_decode = false;
  for (const WorkerView& w : workers) {
    if (std::find(exclude.begin(), exclude.end(), w.info.id()) != exclude.end()) continue;
    const bool full = Outstanding(w) >= options_.max_inflight_per_worker;
    if (w.info.role() == v1::ROLE_DECODE || w.info.role() == v1::ROLE_MIXED) {
      any_decode = true;
      if (!full) decode.push_back(&w);
    } else if (w.info.role() == v1::ROLE_PREFILL && !full) {
      prefill.push_back(&w);
    }
  }
  if (!any_decode) return absl::UnavailableError("no decode worker is available");
  if (decode.empty()) {
    return absl::ResourceExhaustedError("every worker is at its limit of outstanding requests");
  }
  const WorkerView* d = Pick(decode, matches, decode_rr_);
  Placement p;
  p.decode_id = d->info.id();
  p.decode_stub = d->stub;
  p.cached_blocks = Matched(*d, matches);
  const int32_t uncached = prompt_tokens - p.cached_blocks * block_size;
  const bool worth_it =
      options_.policy != "kv-aware" || uncached >= options_.min_remote_prefill_tokens;
  if (!prefill.empty() && worth_it) {
    const WorkerView* pw = Pick(prefill, matches, prefill_rr_);
    p.prefill_id = pw->info.id();
    p.prefill_address = pw->info.grpc_address();
  }
  return p;
}

}  // namespace strata::router
