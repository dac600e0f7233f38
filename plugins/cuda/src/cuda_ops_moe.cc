// Mixture of experts: moe_route (one kernel), moe_experts, and moe_route_experts (both; for a
// single token the routing is computed inside the vector expert kernels).
//
// moe_experts: everything on the device (kernels_moe_experts.cu): a counting sort of the
// (token, k) assignments by expert, grouped gate_up GEMM with the row gather and silu * up
// fused, grouped down GEMM, weighted combine. No host round trip and no allocation once the
// stream's workspace has grown to the largest shape seen, so the call can be graph-captured.
// topk_ids values are device memory and are not read back: an id outside [0, E) contributes
// nothing to its token's sum (the CPU plugin rejects it with INVALID_ARGUMENT instead).
#include "cuda_ops.h"
#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

Status Launched(const char* op, cudaError_t err) { return CudaStatus(op, err, "kernel launch"); }

MoeExpertsArgs KernelArgs(const plugin_common::MoeExpertsArgs& s) {
  MoeExpertsArgs m;
  m.x = static_cast<const bf16*>(s.x.data);
  m.x_stride = s.x.stride;
  m.rows = s.x.rows;
  m.hidden = s.hidden;
  m.inter = s.inter;
  m.experts = s.experts;
  m.top_k = s.top_k;
  m.topk_ids = static_cast<const int32_t*>(s.ids.data);
  m.ids_stride = s.ids.stride;
  m.weights = static_cast<const float*>(s.weights.data);
  m.weights_stride = s.weights.stride;
  m.w_gate_up = static_cast<const bf16*>(s.gate_up.data);
  m.gate_up_expert_stride = s.gate_up.stride;
  m.w_down = static_cast<const bf16*>(s.down.data);
  m.down_expert_stride = s.down.stride;
  m.out = static_cast<bf16*>(s.out.data);
  m.out_stride = s.out.stride;
  return m;
}

// moe_route after its checks.
cudaError_t LaunchRoute(const plugin_common::MoeRouteArgs& a, int32_t top_k, bool renormalize,
                        cudaStream_t stream) {
  return LaunchMoeRoute(static_cast<const bf16*>(a.logits.data), a.logits.stride, a.logits.rows,
                        a.experts, top_k, renormalize, static_cast<float*>(a.weights.data),
                        a.weights.stride, static_cast<int32_t*>(a.ids.data), a.ids.stride, stream);
}

Status RouteUnsupported(const char* op, int64_t experts) {
  return Unsupported(op, experts, " experts exceed this plugin's 4096");
}

// moe_experts after its checks; `route` (moe_route_experts) routes first (LaunchMoeRouteExperts:
// inside the vector kernels where they serve the call). The checks that can fail run before
// anything is enqueued.
Status RunExperts(Stream& st, const char* op, const plugin_common::MoeExpertsArgs& s,
                  const plugin_common::MoeRouteArgs* route, bool renormalize) {
  if (s.x.rows == 0) return Status();
  const MoeExpertsArgs m = KernelArgs(s);
  st.writes.Wrote({ByteRange::Of(s.out)});
  if (route != nullptr) st.writes.Wrote({ByteRange::Of(route->weights), ByteRange::Of(route->ids)});
  // No expert contributes (no hidden columns, or no intermediate ones): out = 0, after the
  // routing is written.
  const bool empty = s.hidden == 0 || s.top_k == 0 || s.inter == 0 || s.experts == 0;
  if (!empty && !MoeExpertsSupported(m)) {
    return Unsupported(op, "needs hidden and intermediate sizes that are multiples of 8, ",
                       "16-byte aligned tensors with row strides that are multiples of 8, ",
                       "fewer than 12288 experts and T * k <= 2^30");
  }
  if (!empty) {
    MoePlan plan;
    void* workspace = nullptr;
    STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(op, PlanMoeExperts(m, &plan), "PlanMoeExperts"));
    STRATA_PLUGIN_RETURN_IF_ERROR(st.Workspace(op, plan.workspace_bytes, &workspace));
    if (route == nullptr) return Launched(op, LaunchMoeExperts(m, plan, workspace, st.stream));
    MoeVectorRouting r;
    r.logits = static_cast<const bf16*>(route->logits.data);
    r.logits_stride = route->logits.stride;
    r.renormalize = renormalize;
    return Launched(op, LaunchMoeRouteExperts(m, plan, r, workspace, st.stream));
  }
  if (route != nullptr) {
    STRATA_PLUGIN_RETURN_IF_ERROR(
        Launched(op, LaunchRoute(*route, static_cast<int32_t>(s.top_k), renormalize, st.stream)));
  }
  if (s.hidden == 0) return Status();
  return Launched(op, LaunchBiasEpilogue(static_cast<bf16*>(s.out.data), s.out.stride, s.out.rows,
                                         s.hidden, nullptr, true, st.stream));
}

}  // namespace

Status MoeRoute(Stream& s, const strata_tensor* router_logits, int32_t top_k, int32_t renormalize,
                strata_tensor* topk_weights, strata_tensor* topk_ids) {
  constexpr const char* kOp = "moe_route";
  plugin_common::MoeRouteArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckMoeRoute(kStorageDtype, router_logits, top_k,
                                                             topk_weights, topk_ids, &a));
  if (a.experts > 4096) return RouteUnsupported(kOp, a.experts);
  s.writes.Wrote({ByteRange::Of(a.weights), ByteRange::Of(a.ids)});
  return Launched(kOp, LaunchRoute(a, top_k, renormalize != 0, s.stream));
}

Status MoeExperts(Stream& st, const strata_tensor* x, const strata_tensor* topk_weights,
                  const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                  const strata_tensor* w_down, strata_tensor* out) {
  constexpr const char* kOp = "moe_experts";
  plugin_common::MoeExpertsArgs s;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckMoeExperts(
      kStorageDtype, x, topk_weights, topk_ids, w_gate_up, w_down, out, &s));
  return RunExperts(st, kOp, s, nullptr, false);
}

Status MoeRouteExperts(Stream& st, const strata_tensor* x, const strata_tensor* router_logits,
                       int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                       strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                       const strata_tensor* w_down, strata_tensor* out) {
  constexpr const char* kOp = "moe_route_experts";
  plugin_common::MoeRouteArgs r;
  plugin_common::MoeExpertsArgs s;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckMoeRouteExperts(kStorageDtype, x, router_logits, top_k, topk_weights,
                                          topk_ids, w_gate_up, w_down, out, &r, &s));
  if (r.experts > 4096) return RouteUnsupported(kOp, r.experts);
  return RunExperts(st, kOp, s, &r, renormalize != 0);
}

}  // namespace strata::cuda
