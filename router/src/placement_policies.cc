// The baseline routing policies: round-robin, least-loaded, kv-aware and kv-cost. The goodput
// policy lives in placement_goodput.cc.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "placement_internal.h"

namespace strata::router {
namespace {

// round-robin / least-loaded / kv-aware: one decode pick and one prefill pick, each over its own
// pool; `rr` counters rotate independently.
class SimplePolicy final : public PlacementPolicy {
 public:
  enum class Kind { kRoundRobin, kLeastLoaded, kKvAware };
  SimplePolicy(Kind kind, const PlacementOptions& options)
      : kind_(kind), min_remote_prefill_tokens_(options.min_remote_prefill_tokens) {}

  absl::StatusOr<Placement> Place(const PlacementContext& ctx) override {
    const WorkerView* d = Pick(ctx.decode, ctx.matches, decode_rr_);
    const int32_t cached = MatchFor(*d, ctx.matches).blocks;
    const int32_t uncached = ctx.request.prompt_tokens - cached * ctx.request.block_size;
    const bool worth_it = kind_ != Kind::kKvAware || uncached >= min_remote_prefill_tokens_;
    const WorkerView* p =
        !ctx.prefill.empty() && worth_it ? Pick(ctx.prefill, ctx.matches, prefill_rr_) : nullptr;
    return MakePlacement(*d, p, ctx.matches);
  }

 private:
  const WorkerView* Pick(const std::vector<const WorkerView*>& c,
                         const std::vector<WorkerMatch>& matches, std::atomic<uint64_t>& rr) {
    if (kind_ == Kind::kRoundRobin) return c[rr.fetch_add(1) % c.size()];
    const WorkerView* best = c[0];
    for (size_t i = 1; i < c.size(); ++i) {
      const WorkerView* w = c[i];
      const int64_t lw = OutstandingRequests(*w), lb = OutstandingRequests(*best);
      if (kind_ == Kind::kKvAware && std::abs(lw - lb) <= 1) {
        // Near-tie on load: the longer cached prefix wins, then the lighter load.
        const int32_t mw = MatchFor(*w, matches).blocks, mb = MatchFor(*best, matches).blocks;
        if (mw != mb) {
          if (mw > mb) best = w;
          continue;
        }
      }
      if (lw < lb) best = w;
    }
    return best;
  }

  const Kind kind_;
  const int min_remote_prefill_tokens_;
  std::atomic<uint64_t> decode_rr_{0}, prefill_rr_{0};
};

// kv-cost (Dynamo's KV router): cost = overlap_weight x blocks the worker must prefill + the
// blocks it already keeps active; the cheapest worker wins, ties to fewer outstanding requests,
// then to the first listed. A prefill pool, when present, is chosen the same way with its
// queued prompt tokens as its active load.
class KvCostPolicy final : public PlacementPolicy {
 public:
  explicit KvCostPolicy(const PlacementOptions& options) : weight_(options.overlap_weight) {}

  absl::StatusOr<Placement> Place(const PlacementContext& ctx) override {
    const int bs = std::max(1, ctx.request.block_size);
    const int64_t prompt_blocks = (int64_t{ctx.request.prompt_tokens} + bs - 1) / bs;
    auto decode_active = [bs](const WorkerView& w) -> double {
      return ActiveDecodeBlocks(w, bs) + CeilDiv(w.load.queued_prefill_tokens, bs);
    };
    auto prefill_active = [bs](const WorkerView& w) -> double {
      return CeilDiv(w.load.queued_prefill_tokens, bs);
    };
    const WorkerView* d = Cheapest(ctx.decode, ctx.matches, prompt_blocks, decode_active);
    const WorkerView* p =
        ctx.prefill.empty() ? nullptr
                            : Cheapest(ctx.prefill, ctx.matches, prompt_blocks, prefill_active);
    return MakePlacement(*d, p, ctx.matches);
  }

  // Blocks of the running sequences: their context when reported, else the used KV blocks.
  static double ActiveDecodeBlocks(const WorkerView& w, int bs) {
    if (w.load.decode_context_tokens > 0) return CeilDiv(w.load.decode_context_tokens, bs);
    return std::max(0, w.load.total_kv_blocks - w.load.free_kv_blocks);
  }

 private:
  static double CeilDiv(int64_t a, int b) { return static_cast<double>((a + b - 1) / b); }

  template <typename Active>
  const WorkerView* Cheapest(const std::vector<const WorkerView*>& c,
                             const std::vector<WorkerMatch>& matches, int64_t prompt_blocks,
                             const Active& active) const {
    const WorkerView* best = nullptr;
    double best_cost = 0;
    for (const WorkerView* w : c) {
      const int64_t needed = std::max<int64_t>(0, prompt_blocks - MatchFor(*w, matches).blocks);
      const double cost = weight_ * static_cast<double>(needed) + active(*w);
      if (best == nullptr || cost < best_cost ||
          (cost == best_cost && OutstandingRequests(*w) < OutstandingRequests(*best))) {
        best = w;
        best_cost = cost;
      }
    }
    return best;
  }

  const double weight_;
};

template <typename P, typename... Args>
PlacementPolicyFactory Factory(Args... args) {
  return [=](const PlacementOptions& o) -> absl::StatusOr<std::unique_ptr<PlacementPolicy>> {
    return std::unique_ptr<PlacementPolicy>(new P(args..., o));
  };
}

}  // namespace

namespace internal {

void RegisterBuiltinPolicies(const RegisterFn& add) {
  add("round-robin", Factory<SimplePolicy>(SimplePolicy::Kind::kRoundRobin));
  add("least-loaded", Factory<SimplePolicy>(SimplePolicy::Kind::kLeastLoaded));
  add("kv-aware", Factory<SimplePolicy>(SimplePolicy::Kind::kKvAware));
  add("kv-cost", Factory<KvCostPolicy>());
  RegisterGoodputPolicy(add);
}

}  // namespace internal
}  // namespace strata::router
