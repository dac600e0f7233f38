// Conformance cases for the optional MoE entries: moe_route and moe_experts. They are skipped
// (not failed) when either backend leaves the MoE entries NULL.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "harness.h"

namespace strata::conformance {
namespace {

enum class Logits { kDistinct, kTies };

// kDistinct: each row a shuffle of values 6/E apart, so the top-k set and order do not hinge
// on rounding. kTies: values from {-1, 0, 0.5, 1.5}, exact in every dtype, so equal
// probabilities are common and the lower-id-first rule decides.
std::vector<float> RouterLogits(Rng& rng, int64_t tokens, int32_t experts, Logits kind) {
  std::vector<float> logits;
  static constexpr float kLevels[] = {-1.0f, 0.0f, 0.5f, 1.5f};
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<int32_t> perm = rng.Permutation(experts);
    for (int32_t e = 0; e < experts; ++e) {
      logits.push_back(kind == Logits::kTies ? kLevels[rng.Int(0, 3)]
                                             : static_cast<float>(-3.0 + 6.0 * perm[e] / experts +
                                                                  rng.Uniform(0, 0.5 / experts)));
    }
  }
  return logits;
}

void AddMoeRoute(uint64_t seed, int64_t tokens, int32_t experts, int32_t top_k, bool renormalize,
                 Logits kind, CaseList* out) {
  std::string name = absl::StrFormat("T=%d E=%d k=%d", tokens, experts, top_k);
  if (renormalize) absl::StrAppend(&name, " renormalize");
  if (kind == Logits::kTies) absl::StrAppend(&name, " ties");
  CaseBuilder cb(seed, "moe_route", name);
  const int logits =
      cb.Values("router_logits", Role::kAct, RouterLogits(cb.rng(), tokens, experts, kind));
  const int weights = cb.Output(cb.Uniform("topk_weights", Role::kF32, tokens * top_k));
  const int ids = cb.Output(cb.Ints("topk_ids", std::vector<int32_t>(tokens * top_k, -1)));
  out->push_back(cb.Build(
      [=](OpContext& ctx) {
        strata_tensor lt = ctx.Tensor(logits, {tokens, experts});
        strata_tensor wt = ctx.Tensor(weights, {tokens, top_k});
        strata_tensor it = ctx.Tensor(ids, {tokens, top_k});
        return ctx.Check(ctx.api().moe_route(ctx.backend(), ctx.stream(), &lt, top_k,
                                             renormalize ? 1 : 0, &wt, &it),
                         "moe_route");
      },
      /*needs_moe=*/true));
}

struct ExpertsSpec {
  int64_t tokens, hidden, inter;
  int32_t experts, top_k;
};

// The case values of moe_experts' tensors (x, topk_weights, topk_ids, w_gate_up, w_down, out)
// and their views in a run.
struct ExpertIds {
  int x, tw, ti, gu, dn, y;
};
struct ExpertViews {
  strata_tensor x, tw, ti, gu, dn, y;
};
ExpertViews ViewExperts(OpContext& ctx, const ExpertIds& v, const ExpertsSpec& s) {
  return {ctx.Tensor(v.x, {s.tokens, s.hidden}),
          ctx.Tensor(v.tw, {s.tokens, s.top_k}),
          ctx.Tensor(v.ti, {s.tokens, s.top_k}),
          ctx.Tensor(v.gu, {s.experts, 2 * s.inter, s.hidden}),
          ctx.Tensor(v.dn, {s.experts, s.hidden, s.inter}),
          ctx.Tensor(v.y, {s.tokens, s.hidden})};
}

void AddMoeExperts(uint64_t seed, const ExpertsSpec& s, CaseList* out) {
  CaseBuilder cb(
      seed, "moe_experts",
      absl::StrFormat("T=%d H=%d I=%d E=%d k=%d", s.tokens, s.hidden, s.inter, s.experts, s.top_k));
  std::vector<int32_t> ids;
  std::vector<float> weights;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const std::vector<int32_t> perm = cb.rng().Permutation(s.experts);
    double sum = 0;
    std::vector<double> w(s.top_k);
    for (double& v : w) sum += (v = cb.rng().Uniform(0.1, 1.0));
    for (int32_t j = 0; j < s.top_k; ++j) {
      ids.push_back(perm[j]);
      weights.push_back(static_cast<float>(w[j] / sum));
    }
  }
  ExpertIds v;
  v.x = cb.Uniform("x", Role::kAct, s.tokens * s.hidden);
  v.tw = cb.Values("topk_weights", Role::kF32, weights);
  v.ti = cb.Ints("topk_ids", ids);
  v.gu = cb.Uniform("w_gate_up", Role::kWeight, s.experts * 2 * s.inter * s.hidden);
  v.dn = cb.Uniform("w_down", Role::kWeight, s.experts * s.hidden * s.inter);
  v.y = cb.Output(cb.Uniform("out", Role::kAct, s.tokens * s.hidden));
  out->push_back(cb.Build(
      [=](OpContext& ctx) {
        ExpertViews t = ViewExperts(ctx, v, s);
        return ctx.Check(ctx.api().moe_experts(ctx.backend(), ctx.stream(), &t.x, &t.tw, &t.ti,
                                               &t.gu, &t.dn, &t.y),
                         "moe_experts");
      },
      /*needs_moe=*/true));
}

// The tensors of one moe_route_experts call with router logits [s.tokens, logit_cols] and the
// call on them; `compared`: the routing (weights, ids) and out are the case's outputs.
RunFn RouteExpertsCall(CaseBuilder& cb, const ExpertsSpec& s, int32_t logit_cols, Logits kind,
                       bool renormalize, bool compared) {
  const int logits =
      cb.Values("router_logits", Role::kAct, RouterLogits(cb.rng(), s.tokens, logit_cols, kind));
  ExpertIds v;
  v.x = cb.Uniform("x", Role::kAct, s.tokens * s.hidden);
  v.tw = cb.Uniform("topk_weights", Role::kF32, s.tokens * s.top_k);
  v.ti = cb.Ints("topk_ids", std::vector<int32_t>(s.tokens * s.top_k, -1));
  v.gu = cb.Uniform("w_gate_up", Role::kWeight, s.experts * 2 * s.inter * s.hidden);
  v.dn = cb.Uniform("w_down", Role::kWeight, s.experts * s.hidden * s.inter);
  v.y = cb.Uniform("out", Role::kAct, s.tokens * s.hidden);
  if (compared) v.tw = cb.Output(v.tw), v.ti = cb.Output(v.ti), v.y = cb.Output(v.y);
  return [=](OpContext& ctx) {
    strata_tensor lt = ctx.Tensor(logits, {s.tokens, logit_cols});
    ExpertViews t = ViewExperts(ctx, v, s);
    return ctx.Check(
        ctx.api().moe_route_experts(ctx.backend(), ctx.stream(), &t.x, &lt, s.top_k,
                                    renormalize ? 1 : 0, &t.tw, &t.ti, &t.gu, &t.dn, &t.y),
        "moe_route_experts");
  };
}

// Each case's logits are distinct enough that the top-k set does not hinge on rounding, or
// exact ties.
void AddMoeRouteExperts(uint64_t seed, const ExpertsSpec& s, bool renormalize, Logits kind,
                        CaseList* out) {
  std::string name =
      absl::StrFormat("T=%d H=%d I=%d E=%d k=%d", s.tokens, s.hidden, s.inter, s.experts, s.top_k);
  if (renormalize) absl::StrAppend(&name, " renormalize");
  if (kind == Logits::kTies) absl::StrAppend(&name, " ties");
  CaseBuilder cb(seed, "moe_route_experts", name);
  TestCase c =
      cb.Build(RouteExpertsCall(cb, s, s.experts, kind, renormalize, true), /*needs_moe=*/true);
  c.needs_entry = "moe_route_experts";
  out->push_back(std::move(c));
}

// Router logits with a column count other than the experts': the op must refuse.
void AddMoeRouteExpertsNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "moe_route_experts", "rejects logits for another expert count");
  TestCase c =
      cb.BuildNegative(RouteExpertsCall(cb, {2, 64, 32, 8, 2}, 16, Logits::kDistinct, true, false),
                       STRATA_ERR_INVALID_ARGUMENT);
  c.needs_entry = "moe_route_experts";
  out->push_back(std::move(c));
}

}  // namespace

void AddMoeRouteCases(uint64_t seed, CaseList* out) {
  AddMoeRoute(seed, 17, 8, 2, true, Logits::kDistinct, out);
  AddMoeRoute(seed, 33, 64, 8, false, Logits::kDistinct, out);
  AddMoeRoute(seed, 9, 128, 8, true, Logits::kDistinct, out);
  AddMoeRoute(seed, 12, 16, 4, true, Logits::kTies, out);
  // Experts not a multiple of 32 (some lanes hold fewer), more than 128 (8 per lane), and
  // top_k past a warp's 32 lanes.
  AddMoeRoute(seed, 5, 60, 4, true, Logits::kTies, out);
  AddMoeRoute(seed, 3, 256, 8, true, Logits::kDistinct, out);
  AddMoeRoute(seed, 4, 96, 40, false, Logits::kTies, out);
}

void AddMoeExpertsCases(uint64_t seed, CaseList* out) {
  AddMoeExperts(seed, {1, 256, 128, 4, 1}, out);
  AddMoeExperts(seed, {7, 64, 32, 8, 2}, out);
  AddMoeExperts(seed, {20, 128, 96, 16, 4}, out);
  // Qwen3-30B-A3B routing (128 experts, top-8) and Mixtral-8x7B (8, top-2, I = 3.5 H) at small
  // hidden sizes; groups big enough for a GPU plugin's prefill tiles; K not a multiple of 64.
  AddMoeExperts(seed, {9, 256, 96, 128, 8}, out);
  AddMoeExperts(seed, {3, 512, 448, 8, 2}, out);
  AddMoeExperts(seed, {300, 256, 128, 8, 2}, out);
  AddMoeExperts(seed, {40, 72, 40, 16, 4}, out);
  // Decode-sized calls (a GPU plugin's vector kernels): top-8 at 64 assignments, top-6 (a
  // partial group of 8), top-3, and rows that are not a multiple of a warp's 32 chunks.
  AddMoeExperts(seed, {8, 256, 96, 128, 8}, out);
  AddMoeExperts(seed, {2, 128, 64, 32, 6}, out);
  AddMoeExperts(seed, {5, 72, 40, 16, 3}, out);
}

void AddMoeRouteExpertsCases(uint64_t seed, CaseList* out) {
  // Decode-sized (a GPU plugin may route inside its vector kernels): Qwen3-30B-A3B routing at
  // one and at eight tokens (64 assignments); one token over 60 experts with ties and over 256;
  // a partial warp of experts with ties, top-2 of 8.
  AddMoeRouteExperts(seed, {1, 256, 96, 128, 8}, true, Logits::kDistinct, out);
  AddMoeRouteExperts(seed, {1, 64, 32, 60, 4}, true, Logits::kTies, out);
  AddMoeRouteExperts(seed, {1, 128, 64, 256, 8}, false, Logits::kDistinct, out);
  AddMoeRouteExperts(seed, {8, 128, 64, 128, 8}, true, Logits::kDistinct, out);
  AddMoeRouteExperts(seed, {3, 72, 40, 60, 4}, false, Logits::kTies, out);
  AddMoeRouteExperts(seed, {2, 512, 448, 8, 2}, true, Logits::kDistinct, out);
  // Prefill-sized (routing then the grouped expert GEMMs).
  AddMoeRouteExperts(seed, {300, 256, 128, 8, 2}, true, Logits::kDistinct, out);
  AddMoeRouteExpertsNegative(seed, out);
}

}  // namespace strata::conformance
