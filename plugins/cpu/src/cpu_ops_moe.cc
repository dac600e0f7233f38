// Mixture of experts: moe_route (softmax + top-k) and moe_experts (grouped expert MLPs).
//
// moe_experts groups the (token, k) assignments by expert with a counting sort, then for each
// expert runs gate_up GEMM -> silu * up -> down GEMM over just its tokens (MatMulNT: streaming
// kernel for decode-sized groups, OpenBLAS for big ones) and adds the weighted rows into out.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "cpu_common.h"
#include "cpu_ops.h"

namespace strata::cpu {
namespace {

// Softmax of one row of logits, then the top_k entries by (weight desc, id asc).
void RouteRow(const float* logits, int64_t experts, int32_t top_k, bool renormalize,
              std::vector<float>& prob, std::vector<int32_t>& order, float* weights, int32_t* ids) {
  const float max = *std::max_element(logits, logits + experts);
  float sum = 0.0f;
  for (int64_t e = 0; e < experts; ++e) {
    prob[e] = std::exp(logits[e] - max);
    sum += prob[e];
  }
  for (int64_t e = 0; e < experts; ++e) prob[e] /= sum;
  // NaN sorts last so the comparison stays a strict weak order whatever the input.
  auto key = [&](int32_t e) {
    return std::isnan(prob[e]) ? -std::numeric_limits<float>::infinity() : prob[e];
  };
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    return key(a) > key(b) || (key(a) == key(b) && a < b);
  });
  float kept = 0.0f;
  for (int32_t j = 0; j < top_k; ++j) kept += prob[order[j]];
  const float norm = renormalize && kept > 0.0f ? 1.0f / kept : 1.0f;
  for (int32_t j = 0; j < top_k; ++j) {
    ids[j] = order[j];
    weights[j] = prob[order[j]] * norm;
  }
}

using ExpertShapes = plugin_common::MoeExpertsArgs;

// The shared descriptor checks, then every topk id against the expert count (host memory here).
Status CheckExperts(const strata_tensor* x, const strata_tensor* topk_weights,
                    const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                    const strata_tensor* w_down, strata_tensor* out, ExpertShapes* s) {
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckMoeExperts(
      kFloatDtype, x, topk_weights, topk_ids, w_gate_up, w_down, out, s));
  for (int64_t t = 0; t < s->ids.rows; ++t) {
    STRATA_PLUGIN_RETURN_IF_ERROR(
        CheckIndices("moe_experts", "topk_ids", s->ids.IntRow(t), s->top_k, 1, s->experts));
  }
  return Status();
}

// (token, slot) assignments sorted by expert: entries [offset[e], offset[e + 1]).
struct Assignment {
  std::vector<int64_t> offset;
  std::vector<int64_t> token;
  std::vector<float> weight;
};

Assignment GroupByExpert(const ExpertShapes& s) {
  Assignment a;
  a.offset.assign(s.experts + 1, 0);
  for (int64_t t = 0; t < s.ids.rows; ++t) {
    for (int64_t j = 0; j < s.top_k; ++j) ++a.offset[s.ids.IntRow(t)[j] + 1];
  }
  std::partial_sum(a.offset.begin(), a.offset.end(), a.offset.begin());
  std::vector<int64_t> fill(a.offset.begin(), a.offset.end() - 1);
  a.token.resize(a.offset.back());
  a.weight.resize(a.offset.back());
  for (int64_t t = 0; t < s.ids.rows; ++t) {
    for (int64_t j = 0; j < s.top_k; ++j) {
      const int64_t at = fill[s.ids.IntRow(t)[j]]++;
      a.token[at] = t;
      a.weight[at] = s.weights.Row<float>(t)[j];
    }
  }
  return a;
}

// Per-expert activations, sized for the busiest expert.
struct ExpertBuffers {
  std::vector<float> x, gate_up, act, y;
};

// buf.act[i] = silu(gate) * up for the n rows of buf.gate_up.
void SiluMulRows(ThreadPool& pool, int64_t n, int64_t inter, ExpertBuffers& buf) {
  pool.ParallelFor(n, pool.GrainFor(n, 8), [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      const float* gate = &buf.gate_up[i * 2 * inter];
      float* act = &buf.act[i * inter];
      for (int64_t c = 0; c < inter; ++c) {
        act[c] = gate[c] / (1.0f + std::exp(-gate[c])) * gate[inter + c];
      }
    }
  });
}

// out[tokens[i]] += weights[i] * buf.y[i]. Split by columns: a token listed twice for one
// expert never races with itself.
void ScatterAdd(ThreadPool& pool, const ExpertShapes& s, int64_t n, const int64_t* tokens,
                const float* weights, const ExpertBuffers& buf) {
  const int64_t h = s.hidden;
  const int64_t min_cols = std::max<int64_t>(256, (16 * 1024) / std::max<int64_t>(n, 1));
  pool.ParallelFor(h, pool.GrainFor(h, min_cols), [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      float* dst = s.out.Row<float>(tokens[i]);
      const float* src = &buf.y[i * h];
      for (int64_t c = c0; c < c1; ++c) dst[c] += weights[i] * src[c];
    }
  });
}

void RunExpert(CpuBackend& be, const ExpertShapes& s, const Assignment& a, int64_t e,
               ExpertBuffers& buf) {
  const int64_t first = a.offset[e], n = a.offset[e + 1] - first;
  const int64_t h = s.hidden, inter = s.inter;
  const int64_t* tokens = a.token.data() + first;
  ThreadPool& pool = be.pool();
  pool.ParallelFor(n, pool.GrainFor(n, 8), [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      std::memcpy(&buf.x[i * h], s.x.Row<float>(tokens[i]), h * sizeof(float));
    }
  });
  MatMulNT(be, n, 2 * inter, h, buf.x.data(), h, s.gate_up.Row<float>(e), h, nullptr, false,
           buf.gate_up.data(), 2 * inter);
  SiluMulRows(pool, n, inter, buf);
  MatMulNT(be, n, h, inter, buf.act.data(), inter, s.down.Row<float>(e), inter, nullptr, false,
           buf.y.data(), h);
  ScatterAdd(pool, s, n, tokens, a.weight.data() + first, buf);
}

}  // namespace

Status MoeRoute(CpuBackend& be, const strata_tensor* router_logits, int32_t top_k,
                int32_t renormalize, strata_tensor* topk_weights, strata_tensor* topk_ids) {
  plugin_common::MoeRouteArgs args;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckMoeRoute(kFloatDtype, router_logits, top_k,
                                                             topk_weights, topk_ids, &args));
  const TensorView &lv = args.logits, &wv = args.weights, &iv = args.ids;
  const int64_t experts = args.experts;
  be.pool().ParallelFor(lv.rows, be.pool().GrainFor(lv.rows, 16), [&](int64_t b, int64_t e) {
    std::vector<float> prob(experts);
    std::vector<int32_t> order(experts);
    for (int64_t t = b; t < e; ++t) {
      int32_t* ids = const_cast<int32_t*>(iv.IntRow(t));
      RouteRow(lv.Row<float>(t), experts, top_k, renormalize != 0, prob, order, wv.Row<float>(t),
               ids);
    }
  });
  return Status();
}

Status MoeExperts(CpuBackend& be, const strata_tensor* x, const strata_tensor* topk_weights,
                  const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                  const strata_tensor* w_down, strata_tensor* out) {
  ExpertShapes s;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CheckExperts(x, topk_weights, topk_ids, w_gate_up, w_down, out, &s));
  for (int64_t t = 0; t < s.out.rows; ++t) std::fill_n(s.out.Row<float>(t), s.hidden, 0.0f);
  const Assignment a = GroupByExpert(s);
  int64_t busiest = 0;
  for (int64_t e = 0; e < s.experts; ++e) {
    busiest = std::max(busiest, a.offset[e + 1] - a.offset[e]);
  }
  ExpertBuffers buf;
  buf.x.resize(busiest * s.hidden);
  buf.gate_up.resize(busiest * 2 * s.inter);
  buf.act.resize(busiest * s.inter);
  buf.y.resize(busiest * s.hidden);
  for (int64_t e = 0; e < s.experts; ++e) {
    if (a.offset[e + 1] > a.offset[e]) RunExpert(be, s, a, e, buf);
  }
  return Status();
}

Status MoeRouteExperts(CpuBackend& be, const strata_tensor* x, const strata_tensor* router_logits,
                       int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                       strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                       const strata_tensor* w_down, strata_tensor* out) {
  plugin_common::MoeRouteArgs route;
  plugin_common::MoeExpertsArgs experts;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckMoeRouteExperts(kFloatDtype, x, router_logits, top_k, topk_weights,
                                          topk_ids, w_gate_up, w_down, out, &route, &experts));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      MoeRoute(be, router_logits, top_k, renormalize, topk_weights, topk_ids));
  return MoeExperts(be, x, topk_weights, topk_ids, w_gate_up, w_down, out);
}

}  // namespace strata::cpu
