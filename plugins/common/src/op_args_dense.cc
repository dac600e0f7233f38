// The argument checks of the row-wise dense ops and gemm (op_args.h).
#include "strata/plugin_common/op_args.h"

namespace strata::plugin_common {

Status CheckEmbedding(strata_dtype float_dtype, IndexValues values, const strata_tensor* table,
                      const strata_tensor* ids, const strata_tensor* out, EmbeddingArgs* a) {
  constexpr const char* kOp = "embedding";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "table", table, float_dtype, 2, 2, &a->table));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "ids", ids, STRATA_DTYPE_I32, 1, 1, &a->ids));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, float_dtype, 2, 2, &a->out));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 0, a->ids.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 1, a->table.cols));
  if (values == IndexValues::kDevice) return Status();
  return CheckIndices(kOp, "ids", a->ids.Ints(), a->ids.rows, 1, a->table.rows);
}

Status CheckGatherRows(strata_dtype float_dtype, IndexValues values, const strata_tensor* x,
                       const strata_tensor* rows, const strata_tensor* out, GatherRowsArgs* a) {
  constexpr const char* kOp = "gather_rows";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, float_dtype, 2, 3, &a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "rows", rows, STRATA_DTYPE_I32, 1, 1, &a->rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, float_dtype, 2, 3, &a->out));
  if (a->out.ndim != a->x.ndim) return InvalidArgument(kOp, "out and x differ in ndim");
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 0, a->rows.rows));
  for (int d = 1; d < a->x.ndim; ++d) {
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, d, a->x.shape[d]));
  }
  if (values == IndexValues::kDevice) return Status();
  return CheckIndices(kOp, "rows", a->rows.Ints(), a->rows.rows, 1, a->x.rows);
}

Status CheckRmsNorm(strata_dtype float_dtype, const strata_tensor* x, const strata_tensor* residual,
                    const strata_tensor* weight, float eps, const strata_tensor* out,
                    RmsNormArgs* a) {
  constexpr const char* kOp = "rms_norm";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, float_dtype, 2, 3, &a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "weight", weight, float_dtype, 1, 1, &a->weight));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, float_dtype, 2, 3, &a->out));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "out", a->out, "x", a->x));
  a->d = a->x.shape[a->x.ndim - 1];
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "weight", a->weight, 0, a->d));
  a->has_residual = residual != nullptr;
  if (a->has_residual) {
    STRATA_PLUGIN_RETURN_IF_ERROR(
        ViewTensor(kOp, "residual", residual, float_dtype, 2, 3, &a->residual));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "residual", a->residual, "x", a->x));
  }
  if (!(eps >= 0.0f)) return InvalidArgument(kOp, "eps must be >= 0, got ", eps);
  return Status();
}

Status CheckRope(strata_dtype float_dtype, const strata_tensor* q, const strata_tensor* k,
                 const strata_tensor* positions, const strata_tensor* inv_freq, RopeArgs* a) {
  constexpr const char* kOp = "rope";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "q", q, float_dtype, 3, 3, &a->q));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "positions", positions, STRATA_DTYPE_I32, 1, 1, &a->positions));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "inv_freq", inv_freq, STRATA_DTYPE_F32, 1, 1, &a->inv_freq));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "positions", a->positions, 0, a->q.rows));
  const int64_t d = a->q.shape[2], r = a->inv_freq.rows;
  if (2 * r > d) {
    return InvalidArgument(kOp, "inv_freq has ", r, " entries but head_dim ", d, " allows at most ",
                           d / 2);
  }
  a->has_k = k != nullptr;
  if (!a->has_k) return Status();
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "k", k, float_dtype, 3, 3, &a->k));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k", a->k, 0, a->q.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k", a->k, 2, d));
  if (a->q.numel() > 0 && a->q.data == a->k.data) {
    return InvalidArgument(kOp, "q and k are the same tensor");
  }
  return Status();
}

Status CheckSiluMul(strata_dtype float_dtype, const strata_tensor* x, const strata_tensor* out,
                    SiluMulArgs* a) {
  constexpr const char* kOp = "silu_mul";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, float_dtype, 2, 2, &a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, float_dtype, 2, 2, &a->out));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 0, a->x.rows));
  a->inter = a->out.cols;
  if (a->x.cols != 2 * a->inter) {
    return InvalidArgument(kOp, "x.shape[1] is ", a->x.cols,
                           ", expected 2 * out.shape[1] = ", 2 * a->inter);
  }
  return Status();
}

Status CheckGemm(strata_dtype float_dtype, const strata_tensor* x, const strata_tensor* w,
                 const strata_tensor* bias, const strata_tensor* out, GemmArgs* a) {
  constexpr const char* kOp = "gemm";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, float_dtype, 2, 3, &a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "w", w, float_dtype, 2, 2, &a->w));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, float_dtype, 2, 3, &a->out));
  a->m = a->x.rows;
  a->k = a->x.cols;
  a->n = a->w.rows;
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "w", a->w, 1, a->k));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 0, a->m));
  if (a->out.cols != a->n) {
    return InvalidArgument(kOp, "out has ", a->out.cols, " columns, expected N = ", a->n);
  }
  a->has_bias = bias != nullptr;
  if (a->has_bias) {
    STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "bias", bias, float_dtype, 1, 1, &a->bias));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "bias", a->bias, 0, a->n));
    if (Overlaps(a->out, a->bias)) return InvalidArgument(kOp, "out overlaps bias");
  }
  if (Overlaps(a->out, a->x)) return InvalidArgument(kOp, "out overlaps x");
  if (Overlaps(a->out, a->w)) return InvalidArgument(kOp, "out overlaps w");
  return Status();
}

}  // namespace strata::plugin_common
