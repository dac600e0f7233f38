// The naive reference plugin: mixture-of-experts routing and expert evaluation.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "naive_internal.h"

namespace strata::naive {
namespace {

// Softmax of one row of logits, in double.
std::vector<double> SoftmaxRow(const strata_tensor& logits, int64_t t) {
  const int64_t experts = logits.shape[1];
  std::vector<double> p(experts);
  double max_logit = -INFINITY, sum = 0;
  for (int64_t e = 0; e < experts; ++e) max_logit = std::max(max_logit, At(logits, t, e));
  for (int64_t e = 0; e < experts; ++e) {
    p[e] = std::exp(At(logits, t, e) - max_logit);
    sum += p[e];
  }
  for (double& v : p) v /= sum;
  return p;
}

// Expert_e(x_t) = w_down[e] * (silu(gate) * up), added to `acc` with weight `weight`.
void AddExpert(const strata_tensor& x, int64_t t, const strata_tensor& w_gate_up,
               const strata_tensor& w_down, int64_t e, double weight, std::vector<double>* acc) {
  const int64_t hidden = x.shape[1], inter = w_down.shape[2];
  std::vector<double> act(inter);
  for (int64_t i = 0; i < inter; ++i) {
    double gate = 0, up = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const double xv = At(x, t, h);
      gate += At(w_gate_up, e, i * hidden + h) * xv;
      up += At(w_gate_up, e, (inter + i) * hidden + h) * xv;
    }
    act[i] = gate / (1.0 + std::exp(-gate)) * up;
  }
  for (int64_t h = 0; h < hidden; ++h) {
    double y = 0;
    for (int64_t i = 0; i < inter; ++i) y += At(w_down, e, h * inter + i) * act[i];
    (*acc)[h] += weight * y;
  }
}

std::string CheckExpertArgs(const strata_tensor* x, const strata_tensor* topk_weights,
                            const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                            const strata_tensor* w_down, const strata_tensor* out) {
  std::string err = ExpectTensor(x, "x", {-1, -1}, Kind::kFloat);
  if (err.empty()) err = ExpectTensor(topk_weights, "topk_weights", {x->shape[0], -1}, Kind::kF32);
  if (!err.empty()) return err;
  const int64_t tokens = x->shape[0], hidden = x->shape[1], k = topk_weights->shape[1];
  err = ExpectTensor(topk_ids, "topk_ids", {tokens, k}, Kind::kI32);
  if (err.empty()) err = ExpectTensor(w_gate_up, "w_gate_up", {-1, -1, hidden}, Kind::kFloat);
  if (!err.empty()) return err;
  const int64_t experts = w_gate_up->shape[0], inter = w_gate_up->shape[1] / 2;
  if (w_gate_up->shape[1] % 2 != 0) return "w_gate_up: odd dim 1";
  err = ExpectTensor(w_down, "w_down", {experts, hidden, inter}, Kind::kFloat);
  if (err.empty()) err = ExpectTensor(out, "out", {tokens, hidden}, Kind::kFloat);
  if (!err.empty()) return err;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = IntAt(*topk_ids, t, j);
      if (e < 0 || e >= experts) return absl::StrCat("topk_ids[", t, "][", j, "] = ", e);
    }
  }
  return "";
}

}  // namespace

strata_status MoeRoute(strata_backend b, strata_stream, const strata_tensor* router_logits,
                       int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                       strata_tensor* topk_ids) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(router_logits, "router_logits", {-1, -1}, Kind::kFloat));
  const int64_t tokens = router_logits->shape[0], experts = router_logits->shape[1];
  if (top_k <= 0 || top_k > experts) return Invalid(b, absl::StrCat("top_k ", top_k));
  STRATA_NAIVE_CHECK(b, ExpectTensor(topk_weights, "topk_weights", {tokens, top_k}, Kind::kF32));
  STRATA_NAIVE_CHECK(b, ExpectTensor(topk_ids, "topk_ids", {tokens, top_k}, Kind::kI32));
  std::vector<int32_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<double> p = SoftmaxRow(*router_logits, t);
    std::iota(order.begin(), order.end(), 0);
    // Descending probability; equal probabilities keep ascending expert ids.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return p[a] > p[c]; });
    double kept = 0;
    for (int32_t j = 0; j < top_k; ++j) kept += p[order[j]];
    for (int32_t j = 0; j < top_k; ++j) {
      Set(*topk_weights, t, j, renormalize != 0 ? p[order[j]] / kept : p[order[j]]);
      SetInt(*topk_ids, t, j, order[j]);
    }
  }
  return STRATA_OK;
}

strata_status MoeExperts(strata_backend b, strata_stream, const strata_tensor* x,
                         const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                         const strata_tensor* w_gate_up, const strata_tensor* w_down,
                         strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, CheckExpertArgs(x, topk_weights, topk_ids, w_gate_up, w_down, out));
  const int64_t hidden = x->shape[1];
  std::vector<double> acc(hidden);
  for (int64_t t = 0; t < x->shape[0]; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < topk_ids->shape[1]; ++j) {
      AddExpert(*x, t, *w_gate_up, *w_down, IntAt(*topk_ids, t, j), At(*topk_weights, t, j), &acc);
    }
    for (int64_t h = 0; h < hidden; ++h) Set(*out, t, h, acc[h]);
  }
  return STRATA_OK;
}

// The composition the ABI defines: moe_route, then moe_experts on its routing.
strata_status MoeRouteExperts(strata_backend b, strata_stream s, const strata_tensor* x,
                              const strata_tensor* router_logits, int32_t top_k,
                              int32_t renormalize, strata_tensor* topk_weights,
                              strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                              const strata_tensor* w_down, strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(w_gate_up, "w_gate_up", {-1, -1, -1}, Kind::kFloat));
  STRATA_NAIVE_CHECK(
      b, ExpectTensor(router_logits, "router_logits", {-1, w_gate_up->shape[0]}, Kind::kFloat));
  const strata_status st =
      MoeRoute(b, s, router_logits, top_k, renormalize, topk_weights, topk_ids);
  return st == STRATA_OK ? MoeExperts(b, s, x, topk_weights, topk_ids, w_gate_up, w_down, out) : st;
}

}  // namespace strata::naive
