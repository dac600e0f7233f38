// Row-wise dense ops: embedding, rms_norm, rope, silu_mul, gather_rows. Each validates its
// arguments, then splits the token rows over the backend's pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_ops.h"

namespace strata::cpu {
namespace {

// Rows per chunk such that a chunk moves at least ~64 KiB (row-wise ops are memory bound).
int64_t RowGrain(CpuBackend& be, int64_t rows, int64_t row_elems) {
  const int64_t min_rows = std::max<int64_t>(1, (16 * 1024) / std::max<int64_t>(row_elems, 1));
  return be.pool().GrainFor(rows, min_rows);
}

// Copies rows ids[i] of src into rows i of dst after the ids were checked.
void CopyRows(CpuBackend& be, const TensorView& src, const TensorView& ids, const TensorView& dst) {
  const int32_t* idx = ids.Ints();
  be.pool().ParallelFor(
      dst.rows, RowGrain(be, dst.rows, dst.cols), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          std::memcpy(dst.Row<float>(i), src.Row<float>(idx[i]), dst.cols * sizeof(float));
        }
      });
}

// residual += x (if residual), then out = norm(residual or x) * weight, for one row of d.
void RmsNormRow(const float* x, float* residual, const float* weight, float eps, int64_t d,
                float* out) {
  const float* src = x;
  if (residual != nullptr) {
    for (int64_t i = 0; i < d; ++i) residual[i] += x[i];
    src = residual;
  }
  const float mean = SumSquares(src, d) / static_cast<float>(d);
  const float inv = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < d; ++i) out[i] = (src[i] * inv) * weight[i];
}

// Rotates the first 2 * r dims of `heads` heads of one token; cs holds cos then sin (scaled).
void RotateHeads(float* x, int64_t heads, int64_t head_dim, const float* cs, int64_t r) {
  const float* sn = cs + r;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < r; ++i) {
      const float x0 = xh[i];
      const float x1 = xh[i + r];
      xh[i] = x0 * cs[i] - x1 * sn[i];
      xh[i + r] = x1 * cs[i] + x0 * sn[i];
    }
  }
}

}  // namespace

Status Embedding(CpuBackend& be, const strata_tensor* table, const strata_tensor* ids,
                 strata_tensor* out) {
  constexpr const char* kOp = "embedding";
  TensorView tv, iv, ov;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "table", table, STRATA_DTYPE_F32, 2, 2, &tv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "ids", ids, STRATA_DTYPE_I32, 1, 1, &iv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, STRATA_DTYPE_F32, 2, 2, &ov));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", ov, 0, iv.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", ov, 1, tv.cols));
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckIndices(kOp, "ids", iv.Ints(), iv.rows, 1, tv.rows));
  CopyRows(be, tv, iv, ov);
  return Status();
}

Status GatherRows(CpuBackend& be, const strata_tensor* x, const strata_tensor* rows,
                  strata_tensor* out) {
  constexpr const char* kOp = "gather_rows";
  TensorView xv, rv, ov;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, STRATA_DTYPE_F32, 2, 3, &xv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "rows", rows, STRATA_DTYPE_I32, 1, 1, &rv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, STRATA_DTYPE_F32, 2, 3, &ov));
  if (ov.ndim != xv.ndim) return InvalidArgument(kOp, "out and x differ in ndim");
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", ov, 0, rv.rows));
  for (int d = 1; d < xv.ndim; ++d) {
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", ov, d, xv.shape[d]));
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckIndices(kOp, "rows", rv.Ints(), rv.rows, 1, xv.rows));
  CopyRows(be, xv, rv, ov);
  return Status();
}

Status RmsNorm(CpuBackend& be, const strata_tensor* x, strata_tensor* residual,
               const strata_tensor* weight, float eps, strata_tensor* out) {
  constexpr const char* kOp = "rms_norm";
  TensorView xv, rv, wv, ov;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, STRATA_DTYPE_F32, 2, 3, &xv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "weight", weight, STRATA_DTYPE_F32, 1, 1, &wv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, STRATA_DTYPE_F32, 2, 3, &ov));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "out", ov, "x", xv));
  const int64_t d = xv.shape[xv.ndim - 1];
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "weight", wv, 0, d));
  if (residual != nullptr) {
    STRATA_PLUGIN_RETURN_IF_ERROR(
        ViewTensor(kOp, "residual", residual, STRATA_DTYPE_F32, 2, 3, &rv));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "residual", rv, "x", xv));
  }
  if (!(eps >= 0.0f)) return InvalidArgument(kOp, "eps must be >= 0, got ", eps);
  if (d == 0) return Status();
  const int64_t heads = xv.cols / d;
  const float* w = wv.Row<float>(0);
  be.pool().ParallelFor(xv.rows, RowGrain(be, xv.rows, xv.cols), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        float* res = residual != nullptr ? rv.Row<float>(t) + h * d : nullptr;
        RmsNormRow(xv.Row<float>(t) + h * d, res, w, eps, d, ov.Row<float>(t) + h * d);
      }
    }
  });
  return Status();
}

Status Rope(CpuBackend& be, strata_tensor* q, strata_tensor* k, const strata_tensor* positions,
            const strata_tensor* inv_freq, float mscale) {
  constexpr const char* kOp = "rope";
  TensorView qv, kv, pv, fv;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "q", q, STRATA_DTYPE_F32, 3, 3, &qv));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "positions", positions, STRATA_DTYPE_I32, 1, 1, &pv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "inv_freq", inv_freq, STRATA_DTYPE_F32, 1, 1, &fv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "positions", pv, 0, qv.rows));
  const int64_t d = qv.shape[2], r = fv.rows;
  if (2 * r > d) {
    return InvalidArgument(kOp, "inv_freq has ", r, " entries but head_dim ", d, " allows at most ",
                           d / 2);
  }
  if (k != nullptr) {
    STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "k", k, STRATA_DTYPE_F32, 3, 3, &kv));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k", kv, 0, qv.rows));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k", kv, 2, d));
    if (qv.numel() > 0 && qv.data == kv.data) {
      return InvalidArgument(kOp, "q and k are the same tensor");
    }
  }
  const float* freq = fv.Row<float>(0);
  const int32_t* pos = pv.Ints();
  be.pool().ParallelFor(qv.rows, RowGrain(be, qv.rows, qv.cols + kv.cols),
                        [&](int64_t b, int64_t e) {
                          std::vector<float> cs(2 * r);
                          for (int64_t t = b; t < e; ++t) {
                            for (int64_t i = 0; i < r; ++i) {
                              const float angle = static_cast<float>(pos[t]) * freq[i];
                              cs[i] = std::cos(angle) * mscale;
                              cs[r + i] = std::sin(angle) * mscale;
                            }
                            RotateHeads(qv.Row<float>(t), qv.shape[1], d, cs.data(), r);
                            if (k != nullptr)
                              RotateHeads(kv.Row<float>(t), kv.shape[1], d, cs.data(), r);
                          }
                        });
  return Status();
}

Status SiluMul(CpuBackend& be, const strata_tensor* x, strata_tensor* out) {
  constexpr const char* kOp = "silu_mul";
  TensorView xv, ov;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, STRATA_DTYPE_F32, 2, 2, &xv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, STRATA_DTYPE_F32, 2, 2, &ov));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", ov, 0, xv.rows));
  const int64_t inter = ov.cols;
  if (xv.cols != 2 * inter) {
    return InvalidArgument(kOp, "x.shape[1] is ", xv.cols,
                           ", expected 2 * out.shape[1] = ", 2 * inter);
  }
  be.pool().ParallelFor(xv.rows, RowGrain(be, xv.rows, xv.cols), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* gate = xv.Row<float>(t);
      const float* up = gate + inter;
      float* o = ov.Row<float>(t);
      for (int64_t i = 0; i < inter; ++i) {
        const float g = gate[i];
        o[i] = g / (1.0f + std::exp(-g)) * up[i];
      }
    }
  });
  return Status();
}

}  // namespace strata::cpu
