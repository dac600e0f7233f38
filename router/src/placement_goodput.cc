// The goodput policy: predict TTFT and TPOT of every candidate placement from the profile's
// latency models, the KV index's per-tier matches and live load; place on the fastest candidate
// that meets both SLOs, or shed the request.
//
// Predictions (all seconds; M = profile.max_batch_tokens):
//   queue(W)     = prefill.a * floor(Q / M) + prefill.b * Q, Q = prompt tokens queued on W
//                  (heartbeat, or the router's own ledger when that is larger)
//   compute(n)   = n split into chunks of M, each chunk prefill.Seconds(chunk, tokens before it)
//   fetch(W)     = cached prefix blocks below G1 at their tier's link speed (G1 is free)
//   local on D   : TTFT = corr(D) * (queue + fetch + compute + the running batch's decode work
//                  riding each prefill step); TPOT = decode(batch+1, context+prompt) + compute /
//                  output tokens when D has a running batch (the stall this prefill puts on it)
//   remote P->D  : TTFT = corr(P) * (queue + fetch + compute on P) + transfer of the blocks D
//                  lacks; TPOT = decode(batch+1, context+prompt)
// corr(W) is the router's EMA of observed / predicted TTFT on W (1 until observed).
// Feasible: TTFT <= the class's ttft and TPOT <= its tpot. Choice: the feasible candidate with
// the least ttft/T + tpot/P; none feasible: ResourceExhausted with a retry-after hint, and the
// least TTFT of a candidate that misses only on TPOT, when a batch of one would meet it
// (kMinTtftPayload: waiting for a decode slot could help).
//
// Cost: each candidate's index match and the placer's live state are looked up once per
// decision (WorkerFacts), not once per prediction.
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

// Compute(n) of the last n asked within one decision: most candidates compute the same number
// of uncached tokens (whole prompt, or all but one shared prefix), so each distinct n is
// modelled once. Same values as calling Compute every time.
struct ComputeMemo {
  const WorkerProfile* profile = nullptr;
  int64_t tokens = -1;
  double seconds = 0;
};

// Prefill of this prompt on one worker: how long until its last prompt token is computed.
struct PrefillSide {
  double seconds = 0;       // queue + fetch + compute, uncorrected
  int64_t tokens = 0;       // tokens to compute
  int64_t steps = 0;        // engine steps the queue and the prompt take
  double compute_s = 0;     // compute alone
};

// One candidate worker's per-request facts, looked up once per decision (the index match and
// the placer's live state), since every candidate is predicted from them several times.
struct WorkerFacts {
  const WorkerView* view = nullptr;
  const WorkerMatch* match = nullptr;  // never null: a zero match when it holds nothing
  double correction = 1;               // Placer::TtftCorrection
  int64_t pending = 0;                 // Placer::PendingPrefillTokens
};

// Index matches by worker id: a dense table while ids are small (they are handed out
// sequentially), else a linear scan of the (short) match list.
class MatchTable {
 public:
  explicit MatchTable(const std::vector<WorkerMatch>& matches) : matches_(matches) {
    WorkerId max_id = 0;
    for (const WorkerMatch& m : matches) max_id = std::max(max_id, m.worker);
    if (max_id < kMaxDense) {
      dense_.assign(size_t{max_id} + 1, nullptr);
      for (const WorkerMatch& m : matches) {
        if (dense_[m.worker] == nullptr) dense_[m.worker] = &m;
      }
    }
  }
  // The match of `w` (the first one listed, like MatchFor), or `none` (zero blocks).
  const WorkerMatch* Find(const WorkerView& w, WorkerMatch* none) const {
    if (!matches_.empty() && !dense_.empty()) {
      if (w.index_id < dense_.size() && dense_[w.index_id] != nullptr) return dense_[w.index_id];
    } else {
      for (const WorkerMatch& m : matches_) {
        if (m.worker == w.index_id) return &m;
      }
    }
    none->worker = w.index_id;
    return none;
  }

 private:
  static constexpr WorkerId kMaxDense = 1 << 16;
  const std::vector<WorkerMatch>& matches_;
  std::vector<const WorkerMatch*> dense_;
};

class GoodputPolicy final : public PlacementPolicy {
 public:
  explicit GoodputPolicy(const PlacementOptions& o) : options_(o), profile_(o.profile) {}

  absl::StatusOr<Placement> Place(const PlacementContext& ctx) override {
    const SloTargets slo = ctx.placer.TargetsFor(ctx.request.slo_class);
    // TTFT counts from the arrival: a request that already waited has that much less left.
    // Feasibility uses what is left (`limit`); the choice among candidates still normalizes by
    // the class's targets.
    SloTargets limit = slo;
    if (ctx.request.waited_s > 0) limit.ttft_s -= ctx.request.waited_s;
    double wait_ttft = kInf;
    const Candidate best = Choose(ctx, slo, limit, &wait_ttft);
    if (Feasible(best, limit)) {
      Placement p = MakePlacement(*best.decode, best.prefill, ctx.matches);
      p.predicted_ttft_s = best.ttft;
      p.predicted_tpot_s = best.tpot;
      p.prefill_tokens = best.prefill_tokens;
      return p;
    }
    return Reject(slo, best, wait_ttft);
  }

 private:
  // The worker's own profile (the router chose it at registration), else the policy's.
  const WorkerProfile& Of(const WorkerView& v) const { return v.profile ? *v.profile : profile_; }

  int BlockSize(const PlacementContext& ctx) const {
    return ctx.request.block_size > 0 ? ctx.request.block_size : std::max(1, profile_.block_size);
  }

  // Facts for ctx.decode then ctx.prefill, in that order.
  std::vector<WorkerFacts> Gather(const PlacementContext& ctx) const {
    std::vector<const WorkerView*> all;
    all.reserve(ctx.decode.size() + ctx.prefill.size());
    all.insert(all.end(), ctx.decode.begin(), ctx.decode.end());
    all.insert(all.end(), ctx.prefill.begin(), ctx.prefill.end());
    std::vector<double> correction;
    std::vector<int64_t> pending;
    ctx.placer.LiveState(all, &correction, &pending);
    std::vector<WorkerFacts> facts(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      facts[i] = {all[i], nullptr, correction[i], pending[i]};
    }
    return facts;
  }

  // Every decode worker locally, and with the best (least-TTFT) prefill worker; the best
  // candidate by Better(). `wait_ttft`: the least TTFT of a candidate that meets the TTFT
  // target and misses only because of its decode batch (kMinTtftPayload), else infinity.
  Candidate Choose(const PlacementContext& ctx, const SloTargets& slo, const SloTargets& limit,
                   double* wait_ttft) const {
    std::vector<WorkerFacts> facts = Gather(ctx);
    const MatchTable table(ctx.matches);
    std::vector<WorkerMatch> none(facts.size());
    for (size_t i = 0; i < facts.size(); ++i) facts[i].match = table.Find(*facts[i].view, &none[i]);
    const size_t num_decode = ctx.decode.size();
    const WorkerFacts* best_p = nullptr;
    PrefillSide best_ps;
    double best_p_ttft = kInf;
    ComputeMemo memo;
    for (size_t i = num_decode; i < facts.size(); ++i) {
      PrefillSide ps = Prefill(ctx, facts[i], memo);
      const double t = facts[i].correction * ps.seconds;
      if (t < best_p_ttft) {
        best_p = &facts[i], best_ps = ps, best_p_ttft = t;
      }
    }
    Candidate best;
    for (size_t i = 0; i < num_decode; ++i) {
      const WorkerFacts& d = facts[i];
      // A batch of one meets the TPOT target: waiting for the batch to shrink could help.
      const bool tpot_reachable =
          Of(*d.view).decode.Seconds(1, ctx.request.prompt_tokens) <= limit.tpot_s;
      const int64_t context = Context(ctx, *d.view);
      const double tpot = DecodeTpot(ctx, *d.view, context);
      Candidate local = Local(ctx, d, tpot, context, memo);
      if (Better(local, best, slo, limit)) best = local;
      if (tpot_reachable && local.ttft <= limit.ttft_s) {
        *wait_ttft = std::min(*wait_ttft, local.ttft);
      }
      if (best_p == nullptr) continue;
      Candidate remote{d.view, best_p->view, best_p_ttft + Transfer(ctx, d), tpot, best_ps.tokens};
      if (Better(remote, best, slo, limit)) best = remote;
      if (tpot_reachable && remote.ttft <= limit.ttft_s) {
        *wait_ttft = std::min(*wait_ttft, remote.ttft);
      }
    }
    return best;
  }

  static bool Feasible(const Candidate& c, const SloTargets& slo) {
    return c.ttft <= slo.ttft_s && c.tpot <= slo.tpot_s;
  }

  // Feasible (within `limit`) beats infeasible; among feasible, the most total slack: the least
  // sum of SLO-normalized latencies, ttft/T + tpot/P, so neither a fast first token on an
  // overloaded decode batch nor a light batch behind a long prefill queue wins outright (ties:
  // list order). Among infeasible, the smaller worst relative overshoot (the retry-after
  // estimate). T and P are the class's targets (`slo`).
  static bool Better(const Candidate& a, const Candidate& b, const SloTargets& slo,
                     const SloTargets& limit) {
    if (b.decode == nullptr) return true;
    const bool fa = Feasible(a, limit), fb = Feasible(b, limit);
    if (fa != fb) return fa;
    if (fa) {
      return a.ttft / slo.ttft_s + a.tpot / slo.tpot_s < b.ttft / slo.ttft_s + b.tpot / slo.tpot_s;
    }
    const double oa = std::max(a.ttft / slo.ttft_s, a.tpot / slo.tpot_s);
    const double ob = std::max(b.ttft / slo.ttft_s, b.tpot / slo.tpot_s);
    return oa < ob;
  }

  Candidate Local(const PlacementContext& ctx, const WorkerFacts& d, double base_tpot,
                  int64_t context, ComputeMemo& memo) const {
    const PrefillSide ps = Prefill(ctx, d, memo);
    const int64_t batch = OutstandingRequests(*d.view);
    const DecodeModel& decode = Of(*d.view).decode;
    // The running batch's decode rows ride along every prefill step (no extra step overhead).
    const double riding = batch > 0 ? static_cast<double>(ps.steps) *
                                          (decode.b * static_cast<double>(context) +
                                           decode.c * static_cast<double>(batch))
                                    : 0;
    Candidate c;
    c.decode = d.view;
    c.ttft = d.correction * (ps.seconds + riding);
    // A running batch stalls for this prefill; spread over this request's output tokens.
    c.tpot = base_tpot + (batch > 0 ? ps.compute_s / static_cast<double>(OutputTokens(ctx)) : 0);
    c.prefill_tokens = ps.tokens;
    return c;
  }

  PrefillSide Prefill(const PlacementContext& ctx, const WorkerFacts& w, ComputeMemo& memo) const {
    const int bs = BlockSize(ctx);
    const int64_t prompt = std::max<int32_t>(1, ctx.request.prompt_tokens);
    const WorkerMatch& m = *w.match;
    // At least the last prompt token is computed (it yields the first output token).
    const int64_t cached = std::min<int64_t>(m.blocks, (prompt - 1) / bs);
    const int64_t queued = std::max(w.view->load.queued_prefill_tokens, w.pending);
    const WorkerProfile& profile = Of(*w.view);
    const int64_t max_tokens = std::max<int64_t>(1, profile.max_batch_tokens);
    PrefillSide ps;
    ps.tokens = prompt - cached * bs;
    if (memo.tokens != ps.tokens || memo.profile != &profile) {
      memo = {&profile, ps.tokens, Compute(profile, ps.tokens, prompt)};
    }
    ps.compute_s = memo.seconds;
    ps.steps = (queued + ps.tokens + max_tokens - 1) / max_tokens;
    const double queue_s = profile.prefill.a * static_cast<double>(queued / max_tokens) +
                           profile.prefill.b * static_cast<double>(queued);
    ps.seconds = queue_s + Fetch(profile, m, cached) + ps.compute_s;
    return ps;
  }

  // The last n tokens of a prompt of `prompt` tokens (the rest cached), chunked into engine
  // steps of at most max_batch_tokens, each chunk attending to everything before it.
  static double Compute(const WorkerProfile& profile, int64_t n, int64_t prompt) {
    return profile.prefill.ChunkedSeconds(n, prompt - n, profile.max_batch_tokens);
  }

  // Cached prefix blocks [0, cached) below G1 come up from their tier. tier_blocks[t] is the
  // longest prefix held wholly in tier t; blocks no single-tier prefix covers (a prefix split
  // across tiers) are charged at the host tier.
  static double Fetch(const WorkerProfile& profile, const WorkerMatch& m, int64_t cached) {
    int64_t covered = std::min<int64_t>(m.tier_blocks[0], cached);
    double s = 0;
    for (int t = 1; t < kNumTiers; ++t) {
      const int64_t upto = std::min<int64_t>(std::max<int64_t>(covered, m.tier_blocks[t]), cached);
      s += profile.FetchSeconds(t, upto - covered);
      covered = upto;
    }
    return s + profile.FetchSeconds(1, cached - covered);
  }

  // KV blocks of the prompt the decode worker does not hold in G1 travel from the prefill
  // worker, at the decode worker's profile's transfer rate (measured on its receiving path).
  double Transfer(const PlacementContext& ctx, const WorkerFacts& d) const {
    const int bs = BlockSize(ctx);
    const int64_t blocks = (int64_t{ctx.request.prompt_tokens} + bs - 1) / bs;
    return Of(*d.view).TransferSeconds(blocks - d.match->tier_blocks[0]);
  }

  // The decode step after admitting this request; infinite when the batch is full. `context`:
  // Context(ctx, d).
  double DecodeTpot(const PlacementContext& ctx, const WorkerView& d, int64_t context) const {
    const int64_t batch = OutstandingRequests(d);
    const WorkerProfile& profile = Of(d);
    if (batch + 1 > profile.max_running) return kInf;
    return profile.decode.Seconds(batch + 1, context + ctx.request.prompt_tokens);
  }

  // Context tokens of the worker's decode batch: reported, else its used KV blocks; plus the
  // prompts the router placed there that the last heartbeat does not show yet.
  int64_t Context(const PlacementContext& ctx, const WorkerView& d) const {
    const int bs = BlockSize(ctx);
    int64_t context = d.load.decode_context_tokens;
    if (context <= 0) {
      context = int64_t{std::max(0, d.load.total_kv_blocks - d.load.free_kv_blocks)} * bs;
    }
    const int64_t unseen = d.inflight - (d.load.running + d.load.waiting);
    return context + std::max<int64_t>(0, unseen) * ctx.request.prompt_tokens;
  }

  int64_t OutputTokens(const PlacementContext& ctx) const {
    return std::max<int64_t>(
        1, ctx.request.max_tokens > 0 ? ctx.request.max_tokens : options_.assumed_output_tokens);
  }

  // ResourceExhausted with the predicted wait: the TTFT overshoot of the closest candidate
  // (its queue must drain that much), at least 1 s, at most 60 s; and kMinTtftPayload when
  // waiting for a decode slot could meet the SLO (`wait_ttft` finite).
  static absl::Status Reject(const SloTargets& slo, const Candidate& best, double wait_ttft) {
    double wait = 1;
    if (std::isfinite(best.ttft)) wait = std::max(wait, std::ceil(best.ttft - slo.ttft_s));
    wait = std::min(wait, 60.0);
    absl::Status s = absl::ResourceExhaustedError(absl::StrFormat(
        "no worker can meet the SLO (TTFT %.3gs, TPOT %.3gs): best predicted TTFT %.3gs, "
        "TPOT %.3gs; retry after %gs",
        slo.ttft_s, slo.tpot_s, best.ttft, best.tpot, wait));
    s.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(wait)));
    if (std::isfinite(wait_ttft)) {
      s.SetPayload(kMinTtftPayload, absl::Cord(absl::StrFormat("%.17g", wait_ttft)));
    }
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
