// The goodput policy: predict TTFT and TPOT of every candidate placement from the profile's
// latency models, the KV index's per-tier matches and live load; place on the fastest candidate
// that meets both SLOs, or shed the request.
//
// Predictions (all seconds; M = profile.max_batch_tokens):
//   queue(W)     = prefill.a * floor(Q / M) + prefill.b * Q, Q = prompt tokens queued on W
//                  (heartbeat, or the router's own ledger when that is larger)
//   compute(n)   = n split into chunks of M, each chunk prefill.Seconds(chunk)
//   fetch(W)     = cached prefix blocks below G1 at their tier's link speed (G1 is free)
//   local on D   : TTFT = corr(D) * (queue + fetch + compute + the running batch's decode work
//                  riding each prefill step); TPOT = decode(batch+1, context+prompt) + compute /
//                  output tokens when D has a running batch (the stall this prefill puts on it)
//   remote P->D  : TTFT = corr(P) * (queue + fetch + compute on P) + transfer of the blocks D
//                  lacks; TPOT = decode(batch+1, context+prompt)
// corr(W) is the router's EMA of observed / predicted TTFT on W (1 until observed).
// Feasible: TTFT <= the class's ttft and TPOT <= its tpot. Choice: the feasible candidate with
// the least ttft/T + tpot/P; none feasible: ResourceExhausted with a retry-after hint.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "placement_internal.h"

namespace strata::router {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Candidate {
  const WorkerView* decode = nullptr;
  const WorkerView* prefill = nullptr;  // nullptr: local
  double ttft = kInf, tpot = kInf;
  int64_t prefill_tokens = 0;
};

// Prefill of this prompt on one worker: how long until its last prompt token is computed.
struct PrefillSide {
  double seconds = 0;       // queue + fetch + compute, uncorrected
  int64_t tokens = 0;       // tokens to compute
  int64_t steps = 0;        // engine steps the queue and the prompt take
  double compute_s = 0;     // compute alone
};

class GoodputPolicy final : public PlacementPolicy {
 public:
  explicit GoodputPolicy(const PlacementOptions& o) : options_(o), profile_(o.profile) {}

  absl::StatusOr<Placement> Place(const PlacementContext& ctx) override {
    const SloTargets slo = ctx.placer.TargetsFor(ctx.request.slo_class);
    const Candidate best = Choose(ctx, slo);
    if (best.ttft <= slo.ttft_s && best.tpot <= slo.tpot_s) {
      Placement p = MakePlacement(*best.decode, best.prefill, ctx.matches);
      p.predicted_ttft_s = best.ttft;
      p.predicted_tpot_s = best.tpot;
      p.prefill_tokens = best.prefill_tokens;
      return p;
    }
    return Reject(slo, best);
  }

 private:
  int BlockSize(const PlacementContext& ctx) const {
    return ctx.request.block_size > 0 ? ctx.request.block_size : std::max(1, profile_.block_size);
  }

  // Every decode worker locally, and with the best (least-TTFT) prefill worker; the best
  // candidate by Better().
  Candidate Choose(const PlacementContext& ctx, const SloTargets& slo) const {
    const WorkerView* best_p = nullptr;
    PrefillSide best_ps;
    double best_p_ttft = kInf;
    for (const WorkerView* p : ctx.prefill) {
      PrefillSide ps = Prefill(ctx, *p);
      const double t = ctx.placer.TtftCorrection(p->info.id()) * ps.seconds;
      if (t < best_p_ttft) {
        best_p = p, best_ps = ps, best_p_ttft = t;
      }
    }
    Candidate best;
    for (const WorkerView* d : ctx.decode) {
      const double tpot = DecodeTpot(ctx, *d);
      Candidate local = Local(ctx, *d, tpot);
      if (Better(local, best, slo)) best = local;
      if (best_p == nullptr) continue;
      Candidate remote{d, best_p, best_p_ttft + Transfer(ctx, *d), tpot, best_ps.tokens};
      if (Better(remote, best, slo)) best = remote;
    }
    return best;
  }

  static bool Feasible(const Candidate& c, const SloTargets& slo) {
    return c.ttft <= slo.ttft_s && c.tpot <= slo.tpot_s;
  }

  // Feasible beats infeasible; among feasible, the most total slack: the least sum of
  // SLO-normalized latencies, ttft/T + tpot/P, so neither a fast first token on an overloaded
  // decode batch nor a light batch behind a long prefill queue wins outright (ties: list
  // order). Among infeasible, the smaller worst relative overshoot (the retry-after estimate).
  static bool Better(const Candidate& a, const Candidate& b, const SloTargets& slo) {
    if (b.decode == nullptr) return true;
    const bool fa = Feasible(a, slo), fb = Feasible(b, slo);
    if (fa != fb) return fa;
    if (fa) {
      return a.ttft / slo.ttft_s + a.tpot / slo.tpot_s < b.ttft / slo.ttft_s + b.tpot / slo.tpot_s;
    }
    const double oa = std::max(a.ttft / slo.ttft_s, a.tpot / slo.tpot_s);
    const double ob = std::max(b.ttft / slo.ttft_s, b.tpot / slo.tpot_s);
    return oa < ob;
  }

  Candidate Local(const PlacementContext& ctx, const WorkerView& d, double base_tpot) const {
    const PrefillSide ps = Prefill(ctx, d);
    const int64_t batch = OutstandingRequests(d);
    // The running batch's decode rows ride along every prefill step (no extra step overhead).
    const double riding =
        batch > 0 ? static_cast<double>(ps.steps) *
                        (profile_.decode.b * static_cast<double>(Context(ctx, d)) +
                         profile_.decode.c * static_cast<double>(batch))
                  : 0;
    Candidate c;
    c.decode = &d;
    c.ttft = ctx.placer.TtftCorrection(d.info.id()) * (ps.seconds + riding);
    // A running batch stalls for this prefill; spread over this request's output tokens.
    c.tpot = base_tpot + (batch > 0 ? ps.compute_s / static_cast<double>(OutputTokens(ctx)) : 0);
    c.prefill_tokens = ps.tokens;
    return c;
  }

  PrefillSide Prefill(const PlacementContext& ctx, const WorkerView& w) const {
    const int bs = BlockSize(ctx);
    const int64_t prompt = std::max<int32_t>(1, ctx.request.prompt_tokens);
    const WorkerMatch m = MatchFor(w, ctx.matches);
    // At least the last prompt token is computed (it yields the first output token).
    const int64_t cached = std::min<int64_t>(m.blocks, (prompt - 1) / bs);
    const int64_t queued =
        std::max(w.load.queued_prefill_tokens(), ctx.placer.PendingPrefillTokens(w.info.id()));
    const int64_t max_tokens = std::max<int64_t>(1, profile_.max_batch_tokens);
    PrefillSide ps;
    ps.tokens = prompt - cached * bs;
    ps.compute_s = Compute(ps.tokens);
    ps.steps = (queued + ps.tokens + max_tokens - 1) / max_tokens;
    const double queue_s = profile_.prefill.a * static_cast<double>(queued / max_tokens) +
                           profile_.prefill.b * static_cast<double>(queued);
    ps.seconds = queue_s + Fetch(m, cached) + ps.compute_s;
    return ps;
  }

  // One prompt of n new tokens, chunked into engine steps of at most max_batch_tokens.
  double Compute(int64_t n) const {
    const int64_t m = std::max<int64_t>(1, profile_.max_batch_tokens);
    const int64_t full = n / m, rest = n % m;
    double s = static_cast<double>(full) * profile_.prefill.Seconds(m);
    if (rest > 0) s += profile_.prefill.Seconds(rest);
    return s;
  }

  // Cached prefix blocks [0, cached) below G1 come up from their tier. tier_blocks[t] is the
  // longest prefix held wholly in tier t; blocks no single-tier prefix covers (a prefix split
  // across tiers) are charged at the host tier.
  double Fetch(const WorkerMatch& m, int64_t cached) const {
    int64_t covered = std::min<int64_t>(m.tier_blocks[0], cached);
    double s = 0;
    for (int t = 1; t < kNumTiers; ++t) {
      const int64_t upto = std::min<int64_t>(std::max<int64_t>(covered, m.tier_blocks[t]), cached);
      s += profile_.FetchSeconds(t, upto - covered);
      covered = upto;
    }
    return s + profile_.FetchSeconds(1, cached - covered);
  }

  // KV blocks of the prompt the decode worker does not hold in G1 travel from the prefill worker.
  double Transfer(const PlacementContext& ctx, const WorkerView& d) const {
    const int bs = BlockSize(ctx);
    const int64_t blocks = (int64_t{ctx.request.prompt_tokens} + bs - 1) / bs;
    return profile_.TransferSeconds(blocks - MatchFor(d, ctx.matches).tier_blocks[0]);
  }

  // The decode step after admitting this request; infinite when the batch is full.
  double DecodeTpot(const PlacementContext& ctx, const WorkerView& d) const {
    const int64_t batch = OutstandingRequests(d);
    if (batch + 1 > profile_.max_running) return kInf;
    return profile_.decode.Seconds(batch + 1, Context(ctx, d) + ctx.request.prompt_tokens);
  }

  // Context tokens of the worker's decode batch: reported, else its used KV blocks; plus the
  // prompts the router placed there that the last heartbeat does not show yet.
  int64_t Context(const PlacementContext& ctx, const WorkerView& d) const {
    const int bs = BlockSize(ctx);
    int64_t context = d.load.decode_context_tokens();
    if (context <= 0) {
      context = int64_t{std::max(0, d.load.total_kv_blocks() - d.load.free_kv_blocks())} * bs;
    }
    const int64_t unseen = d.inflight - (d.load.running() + d.load.waiting());
    return context + std::max<int64_t>(0, unseen) * ctx.request.prompt_tokens;
  }

  int64_t OutputTokens(const PlacementContext& ctx) const {
    return std::max<int64_t>(
        1, ctx.request.max_tokens > 0 ? ctx.request.max_tokens : options_.assumed_output_tokens);
  }

  // ResourceExhausted with the predicted wait: the TTFT overshoot of the closest candidate
  // (its queue must drain that much), at least 1 s, at most 60 s.
  static absl::Status Reject(const SloTargets& slo, const Candidate& best) {
    double wait = 1;
    if (std::isfinite(best.ttft)) wait = std::max(wait, std::ceil(best.ttft - slo.ttft_s));
    wait = std::min(wait, 60.0);
    absl::Status s = absl::ResourceExhaustedError(absl::StrFormat(
        "no worker can meet the SLO (TTFT %.3gs, TPOT %.3gs): best predicted TTFT %.3gs, "
        "TPOT %.3gs; retry after %gs",
        slo.ttft_s, slo.tpot_s, best.ttft, best.tpot, wait));
    s.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(wait)));
    return s;
  }

  const PlacementOptions options_;
  const WorkerProfile profile_;
};

}  // namespace

namespace internal {

void RegisterGoodputPolicy(const RegisterFn& add) {
  add("goodput", [](const PlacementOptions& o)
                     -> absl::StatusOr<std::unique_ptr<PlacementPolicy>> {
    if (o.profile.max_batch_tokens <= 0 || o.profile.max_running <= 0) {
      return absl::InvalidArgumentError("goodput policy: the profile's batch limits must be > 0");
    }
    return std::unique_ptr<PlacementPolicy>(new GoodputPolicy(o));
  });
}

}  // namespace internal
}  // namespace strata::router
