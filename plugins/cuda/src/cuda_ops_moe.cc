// Mixture of experts: moe_route (one kernel) and moe_experts.
//
// moe_experts, v0: the (token, k) assignments are grouped by expert on the host (topk_ids is
// copied back, which synchronizes the stream), then on the device: the assigned rows of x are
// gathered in expert order, each expert with rows runs gate_up GEMM -> silu * up -> down GEMM
// (cuBLAS, fp32 outputs) over its contiguous slice, and a combine kernel sums each token's k
// weighted rows in fp32 into out. Deterministic (no atomics); one round trip per call.
#include <algorithm>
#include <climits>
#include <vector>

#include "cuda_kernels.h"
#include "cuda_ops.h"
#include "cuda_tensor.h"

namespace strata::cuda {
namespace {

Status Launched(const char* op, cudaError_t err) { return CudaStatus(op, err, "kernel launch"); }

struct ExpertShapes {
  TensorView x, weights, ids, gate_up, down, out;
  int64_t experts = 0, hidden = 0, inter = 0, top_k = 0;
};

Status CheckExperts(const strata_tensor* x, const strata_tensor* topk_weights,
                    const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                    const strata_tensor* w_down, strata_tensor* out, ExpertShapes* s) {
  constexpr const char* kOp = "moe_experts";
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, kStorageDtype, 2, 2, &s->x));
  STRATA_CUDA_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_weights", topk_weights, STRATA_DTYPE_F32, 2, 2, &s->weights));
  STRATA_CUDA_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_ids", topk_ids, STRATA_DTYPE_I32, 2, 2, &s->ids));
  STRATA_CUDA_RETURN_IF_ERROR(
      ViewTensor(kOp, "w_gate_up", w_gate_up, kStorageDtype, 3, 3, &s->gate_up));
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "w_down", w_down, kStorageDtype, 3, 3, &s->down));
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, kStorageDtype, 2, 2, &s->out));
  s->experts = s->gate_up.shape[0];
  s->hidden = s->x.shape[1];
  s->inter = s->gate_up.shape[1] / 2;
  s->top_k = s->ids.shape[1];
  STRATA_CUDA_RETURN_IF_ERROR(ExpectShape(kOp, "out", s->out, "x", s->x));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectShape(kOp, "topk_weights", s->weights, "topk_ids", s->ids));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "topk_ids", s->ids, 0, s->x.rows));
  if (s->gate_up.shape[1] % 2 != 0) {
    return InvalidArgument(kOp, "w_gate_up.shape[1] is ", s->gate_up.shape[1], ", not 2 * I");
  }
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "w_gate_up", s->gate_up, 2, s->hidden));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "w_down", s->down, 0, s->experts));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "w_down", s->down, 1, s->hidden));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "w_down", s->down, 2, s->inter));
  if (Overlaps(s->out, s->x)) return InvalidArgument(kOp, "out overlaps x");
  if (s->hidden > INT_MAX || s->gate_up.shape[1] > INT_MAX || s->ids.numel() > INT_MAX) {
    return InvalidArgument(kOp, "a dimension exceeds INT_MAX");
  }
  return Status();
}

// Assignments a = t * top_k + j sorted by expert: sorted slot i holds token token[i]; the
// assignment a sits at slot inv[a]; expert e owns slots [offset[e], offset[e + 1]).
struct Grouping {
  std::vector<int64_t> offset;
  std::vector<int32_t> token;
  std::vector<int32_t> inv;
};

Status GroupByExpert(const ExpertShapes& s, const std::vector<int32_t>& ids, Grouping* g) {
  const int64_t rows = s.ids.rows, k = s.top_k, stride = s.ids.stride;
  g->offset.assign(s.experts + 1, 0);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * stride + j];
      if (e < 0 || e >= s.experts) {
        return InvalidArgument("moe_experts", "topk_ids[", t, ", ", j, "] = ", e,
                               " is out of range [0, ", s.experts, ")");
      }
      ++g->offset[e + 1];
    }
  }
  for (int64_t e = 0; e < s.experts; ++e) g->offset[e + 1] += g->offset[e];
  std::vector<int64_t> fill(g->offset.begin(), g->offset.end() - 1);
  g->token.resize(rows * k);
  g->inv.resize(rows * k);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = fill[ids[t * stride + j]]++;
      g->token[at] = static_cast<int32_t>(t);
      g->inv[t * k + j] = static_cast<int32_t>(at);
    }
  }
  return Status();
}

// One stream-ordered device allocation carved into the per-call buffers.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() {
    if (base_ != nullptr) cudaFreeAsync(base_, stream_);
  }
  // Reserves `bytes` (256-aligned) and returns its offset; call Allocate after the last one.
  size_t Reserve(size_t bytes) {
    const size_t at = size_;
    size_ += (bytes + 255) / 256 * 256;
    return at;
  }
  Status Allocate(const char* op) {
    return CudaStatus(op, cudaMallocAsync(&base_, std::max<size_t>(size_, 256), stream_),
                      "cudaMallocAsync");
  }
  template <typename T>
  T* At(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
  }

 private:
  cudaStream_t stream_;
  void* base_ = nullptr;
  size_t size_ = 0;
};

Status RunExperts(Stream& st, const ExpertShapes& s, const Grouping& g) {
  constexpr const char* kOp = "moe_experts";
  const int64_t n = static_cast<int64_t>(g.token.size());
  const int64_t h = s.hidden, inter = s.inter;
  Scratch scratch(st.stream);
  const size_t token_at = scratch.Reserve(n * sizeof(int32_t));
  const size_t inv_at = scratch.Reserve(n * sizeof(int32_t));
  const size_t xs_at = scratch.Reserve(n * h * sizeof(bf16));
  const size_t gu_at = scratch.Reserve(n * 2 * inter * sizeof(float));
  const size_t act_at = scratch.Reserve(n * inter * sizeof(bf16));
  const size_t y_at = scratch.Reserve(n * h * sizeof(float));
  STRATA_CUDA_RETURN_IF_ERROR(scratch.Allocate(kOp));
  // Pageable sources: the copies return once the host buffers have been staged.
  STRATA_CUDA_RETURN_IF_ERROR(
      CudaStatus(kOp,
                 cudaMemcpyAsync(scratch.At<int32_t>(token_at), g.token.data(), n * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, st.stream),
                 "cudaMemcpyAsync"));
  STRATA_CUDA_RETURN_IF_ERROR(
      CudaStatus(kOp,
                 cudaMemcpyAsync(scratch.At<int32_t>(inv_at), g.inv.data(), n * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, st.stream),
                 "cudaMemcpyAsync"));
  bf16* xs = scratch.At<bf16>(xs_at);
  float* gu = scratch.At<float>(gu_at);
  bf16* act = scratch.At<bf16>(act_at);
  float* y = scratch.At<float>(y_at);
  STRATA_CUDA_RETURN_IF_ERROR(
      Launched(kOp, LaunchGatherRows(static_cast<const bf16*>(s.x.data), s.x.stride, s.x.rows,
                                     scratch.At<int32_t>(token_at), n, h, xs, h, st.stream)));
  const bf16* w_gu = static_cast<const bf16*>(s.gate_up.data);
  const bf16* w_dn = static_cast<const bf16*>(s.down.data);
  for (int64_t e = 0; e < s.experts; ++e) {
    const int64_t begin = g.offset[e], rows = g.offset[e + 1] - begin;
    if (rows == 0) continue;
    STRATA_CUDA_RETURN_IF_ERROR(GemmNT(kOp, st, rows, 2 * inter, h, xs + begin * h, h,
                                       w_gu + e * s.gate_up.stride, h, gu + begin * 2 * inter,
                                       CUDA_R_32F, 2 * inter, 0.0f));
  }
  STRATA_CUDA_RETURN_IF_ERROR(
      Launched(kOp, LaunchSiluMulF32(gu, 2 * inter, n, inter, act, inter, st.stream)));
  for (int64_t e = 0; e < s.experts; ++e) {
    const int64_t begin = g.offset[e], rows = g.offset[e + 1] - begin;
    if (rows == 0) continue;
    STRATA_CUDA_RETURN_IF_ERROR(GemmNT(kOp, st, rows, h, inter, act + begin * inter, inter,
                                       w_dn + e * s.down.stride, inter, y + begin * h, CUDA_R_32F,
                                       h, 0.0f));
  }
  return Launched(
      kOp, LaunchMoeCombine(y, h, scratch.At<int32_t>(inv_at),
                            static_cast<const float*>(s.weights.data), s.weights.stride, s.x.rows,
                            s.top_k, static_cast<bf16*>(s.out.data), s.out.stride, st.stream));
}

}  // namespace

Status MoeRoute(Stream& s, const strata_tensor* router_logits, int32_t top_k, int32_t renormalize,
                strata_tensor* topk_weights, strata_tensor* topk_ids) {
  constexpr const char* kOp = "moe_route";
  TensorView lv, wv, iv;
  STRATA_CUDA_RETURN_IF_ERROR(
      ViewTensor(kOp, "router_logits", router_logits, kStorageDtype, 2, 2, &lv));
  STRATA_CUDA_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_weights", topk_weights, STRATA_DTYPE_F32, 2, 2, &wv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "topk_ids", topk_ids, STRATA_DTYPE_I32, 2, 2, &iv));
  const int64_t experts = lv.shape[1];
  if (top_k < 1 || top_k > experts) {
    return InvalidArgument(kOp, "top_k ", top_k, " is out of range [1, ", experts, "]");
  }
  if (experts > 4096) return Unsupported(kOp, experts, " experts exceed this plugin's 4096");
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "topk_weights", wv, 0, lv.rows));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "topk_weights", wv, 1, top_k));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectShape(kOp, "topk_ids", iv, "topk_weights", wv));
  return Launched(
      kOp, LaunchMoeRoute(static_cast<const bf16*>(lv.data), lv.stride, lv.rows, experts, top_k,
                          renormalize != 0, static_cast<float*>(wv.data), wv.stride,
                          static_cast<int32_t*>(iv.data), iv.stride, s.stream));
}

Status MoeExperts(Stream& st, const strata_tensor* x, const strata_tensor* topk_weights,
                  const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                  const strata_tensor* w_down, strata_tensor* out) {
  constexpr const char* kOp = "moe_experts";
  ExpertShapes s;
  STRATA_CUDA_RETURN_IF_ERROR(CheckExperts(x, topk_weights, topk_ids, w_gate_up, w_down, out, &s));
  if (s.x.rows == 0 || s.hidden == 0) return Status();
  if (s.top_k == 0 || s.inter == 0) {  // no expert contributes: out = 0
    return Launched(kOp, LaunchBiasEpilogue(static_cast<bf16*>(s.out.data), s.out.stride,
                                            s.out.rows, s.hidden, nullptr, true, st.stream));
  }
  std::vector<int32_t> ids(s.ids.rows * s.ids.stride);
  STRATA_CUDA_RETURN_IF_ERROR(
      CudaStatus(kOp,
                 cudaMemcpyAsync(ids.data(), s.ids.data,
                                 ((s.ids.rows - 1) * s.ids.stride + s.top_k) * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, st.stream),
                 "cudaMemcpyAsync(topk_ids)"));
  STRATA_CUDA_RETURN_IF_ERROR(
      CudaStatus(kOp, cudaStreamSynchronize(st.stream), "cudaStreamSynchronize"));
  Grouping g;
  STRATA_CUDA_RETURN_IF_ERROR(GroupByExpert(s, ids, &g));
  return RunExperts(st, s, g);
}

}  // namespace strata::cuda
