// Dense ops: embedding, rms_norm, gemm (cuBLAS), rope, silu_mul, gather_rows.
#include <climits>

#include "cuda_common.h"
#include "cuda_ops.h"
#include "strata/kernels/cuda_kernels.h"
#include "strata/plugin_common/op_args.h"

namespace strata::cuda {
namespace {

bf16* Bf16(const TensorView& v) { return static_cast<bf16*>(v.data); }
const int32_t* Ints(const TensorView& v) { return static_cast<const int32_t*>(v.data); }

Status Launched(const char* op, cudaError_t err) { return CudaStatus(op, err, "kernel launch"); }

}  // namespace

Status Embedding(Stream& s, const strata_tensor* table, const strata_tensor* ids,
                 strata_tensor* out) {
  constexpr const char* kOp = "embedding";
  plugin_common::EmbeddingArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckEmbedding(
      kStorageDtype, plugin_common::IndexValues::kDevice, table, ids, out, &a));
  const TensorView &tv = a.table, &iv = a.ids, &ov = a.out;
  s.writes.Wrote({ByteRange::Of(ov)});
  return Launched(kOp, LaunchGatherRows(Bf16(tv), tv.stride, tv.rows, Ints(iv), iv.rows, tv.cols,
                                        Bf16(ov), ov.stride, s.stream));
}

Status GatherRows(Stream& s, const strata_tensor* x, const strata_tensor* rows,
                  strata_tensor* out) {
  constexpr const char* kOp = "gather_rows";
  plugin_common::GatherRowsArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckGatherRows(
      kStorageDtype, plugin_common::IndexValues::kDevice, x, rows, out, &a));
  const TensorView &xv = a.x, &rv = a.rows, &ov = a.out;
  return Launched(kOp, LaunchGatherRows(Bf16(xv), xv.stride, xv.rows, Ints(rv), rv.rows, xv.cols,
                                        Bf16(ov), ov.stride, s.stream));
}

Status RmsNorm(Stream& s, const strata_tensor* x, strata_tensor* residual,
               const strata_tensor* weight, float eps, strata_tensor* out) {
  constexpr const char* kOp = "rms_norm";
  plugin_common::RmsNormArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckRmsNorm(kStorageDtype, x, residual, weight, eps, out, &a));
  const TensorView &xv = a.x, &rv = a.residual, &wv = a.weight, &ov = a.out;
  const int64_t d = a.d;
  if (d == 0) return Status();
  s.writes.Wrote({ByteRange::Of(ov)});
  if (residual != nullptr) s.writes.Wrote({ByteRange::Of(rv)});
  return Launched(
      kOp, LaunchRmsNorm(Bf16(xv), xv.stride, residual != nullptr ? Bf16(rv) : nullptr, rv.stride,
                         Bf16(wv), eps, xv.rows, xv.cols / d, d, Bf16(ov), ov.stride, s.stream));
}

Status GemmNT(const char* op, Stream& s, int64_t m, int64_t n, int64_t k, const void* x,
              int64_t ldx, const void* w, int64_t ldw, void* out, cudaDataType_t out_type,
              int64_t ldo, float beta) {
  for (int64_t v : {m, n, k, ldx, ldw, ldo}) {
    if (v > INT_MAX) return InvalidArgument(op, "a dimension or row stride exceeds INT_MAX");
  }
  const float alpha = 1.0f;
  // Row-major out = x * w^T is column-major out^T = (w^T)^T * x^T: A = w, B = x.
  return CublasStatus(
      op,
      cublasGemmEx(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(ldw), x,
                   CUDA_R_16BF, static_cast<int>(ldx), &beta, out, out_type, static_cast<int>(ldo),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

Status Gemm(Stream& s, const strata_tensor* x, const strata_tensor* w, const strata_tensor* bias,
            int32_t accumulate, strata_tensor* out) {
  constexpr const char* kOp = "gemm";
  plugin_common::GemmArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckGemm(kStorageDtype, x, w, bias, out, &a));
  const TensorView &xv = a.x, &wv = a.w, &bv = a.bias, &ov = a.out;
  const int64_t m = a.m, k = a.k, n = a.n;
  if (m == 0 || n == 0) return Status();
  const bf16* b = bias != nullptr ? Bf16(bv) : nullptr;
  // The weights may be read before the kernel enqueued just before is done, unless an op just
  // before may have written them.
  const bool early_weights = !s.writes.WrittenJustBefore(ByteRange::Of(wv));
  s.writes.Wrote({ByteRange::Of(ov)});
  if (k == 0) {  // out = (accumulate ? out : 0) + bias, without asking cuBLAS about K = 0
    return Launched(kOp,
                    LaunchBiasEpilogue(Bf16(ov), ov.stride, m, n, b, accumulate == 0, s.stream));
  }
  // Decode-sized M: the weight-streaming kernel (bias and accumulation fused).
  if (GemvServes(m, n, k, Bf16(xv), xv.stride, Bf16(wv), wv.stride)) {
    return Launched(kOp, LaunchGemv(m, n, k, Bf16(xv), xv.stride, Bf16(wv), wv.stride, b,
                                    accumulate != 0, Bf16(ov), ov.stride, early_weights, s.stream));
  }
  if (SkinnyGemmServes(m, n, k, Bf16(xv), xv.stride, Bf16(wv), wv.stride)) {
    return Launched(
        kOp, LaunchSkinnyGemm(m, n, k, Bf16(xv), xv.stride, Bf16(wv), wv.stride, b, accumulate != 0,
                              Bf16(ov), ov.stride, early_weights, s.stream));
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(GemmNT(kOp, s, m, n, k, xv.data, xv.stride, wv.data, wv.stride,
                                       ov.data, CUDA_R_16BF, ov.stride, accumulate ? 1.0f : 0.0f));
  if (b == nullptr) return Status();
  return Launched(kOp, LaunchBiasEpilogue(Bf16(ov), ov.stride, m, n, b, false, s.stream));
}

Status Rope(Stream& s, strata_tensor* q, strata_tensor* k, const strata_tensor* positions,
            const strata_tensor* inv_freq, float mscale) {
  constexpr const char* kOp = "rope";
  plugin_common::RopeArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckRope(kStorageDtype, q, k, positions, inv_freq, &a));
  const TensorView &qv = a.q, &kv = a.k, &pv = a.positions, &fv = a.inv_freq;
  const int64_t d = qv.shape[2], r = fv.rows;
  return Launched(kOp,
                  LaunchRope(Bf16(qv), qv.stride, qv.shape[1], k != nullptr ? Bf16(kv) : nullptr,
                             kv.stride, k != nullptr ? kv.shape[1] : 0, d, Ints(pv),
                             static_cast<const float*>(fv.data), r, qv.rows, mscale, s.stream));
}

Status SiluMul(Stream& s, const strata_tensor* x, strata_tensor* out) {
  constexpr const char* kOp = "silu_mul";
  plugin_common::SiluMulArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckSiluMul(kStorageDtype, x, out, &a));
  const TensorView &xv = a.x, &ov = a.out;
  const int64_t inter = a.inter;
  return Launched(
      kOp, LaunchSiluMul(Bf16(xv), xv.stride, xv.rows, inter, Bf16(ov), ov.stride, s.stream));
}

Status GemmSiluMul(Stream& s, const strata_tensor* x, const strata_tensor* w_gate_up,
                   const strata_tensor* bias, strata_tensor* scratch, strata_tensor* out) {
  constexpr const char* kOp = "gemm_silu_mul";
  plugin_common::GemmSiluMulArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckGemmSiluMul(kStorageDtype, x, w_gate_up, bias, scratch, out, &a));
  const int64_t m = a.x.rows, k = a.x.cols, inter = a.inter;
  if (m == 0 || inter == 0) return Status();
  const bool early_weights = !s.writes.WrittenJustBefore(ByteRange::Of(a.w));
  s.writes.Wrote({ByteRange::Of(a.out), ByteRange::Of(a.scratch)});
  if (GemvServes(m, 2 * inter, k, Bf16(a.x), a.x.stride, Bf16(a.w), a.w.stride)) {
    return Launched(kOp, LaunchGemvSiluMul(m, inter, k, Bf16(a.x), a.x.stride, Bf16(a.w),
                                           a.w.stride, a.has_bias ? Bf16(a.bias) : nullptr,
                                           Bf16(a.out), a.out.stride, early_weights, s.stream));
  }
  if (SkinnyGemmSiluServes(m, inter, k, Bf16(a.x), a.x.stride, Bf16(a.w), a.w.stride)) {
    return Launched(
        kOp, LaunchSkinnyGemmSiluMul(m, inter, k, Bf16(a.x), a.x.stride, Bf16(a.w), a.w.stride,
                                     a.has_bias ? Bf16(a.bias) : nullptr, Bf16(a.out), a.out.stride,
                                     early_weights, s.stream));
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(Gemm(s, x, w_gate_up, bias, 0, scratch));
  return SiluMul(s, scratch, out);
}

}  // namespace strata::cuda
