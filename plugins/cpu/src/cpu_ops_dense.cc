// Row-wise dense ops: embedding, rms_norm, rope, silu_mul, gather_rows. Each validates its
// arguments, then splits the token rows over the backend's pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_ops.h"
#include "strata/plugin_common/op_args.h"

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
  plugin_common::EmbeddingArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckEmbedding(
      kFloatDtype, plugin_common::IndexValues::kHost, table, ids, out, &a));
  const TensorView &tv = a.table, &iv = a.ids, &ov = a.out;
  CopyRows(be, tv, iv, ov);
  return Status();
}

Status GatherRows(CpuBackend& be, const strata_tensor* x, const strata_tensor* rows,
                  strata_tensor* out) {
  plugin_common::GatherRowsArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckGatherRows(
      kFloatDtype, plugin_common::IndexValues::kHost, x, rows, out, &a));
  const TensorView &xv = a.x, &rv = a.rows, &ov = a.out;
  CopyRows(be, xv, rv, ov);
  return Status();
}

Status RmsNorm(CpuBackend& be, const strata_tensor* x, strata_tensor* residual,
               const strata_tensor* weight, float eps, strata_tensor* out) {
  plugin_common::RmsNormArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckRmsNorm(kFloatDtype, x, residual, weight, eps, out, &a));
  const TensorView &xv = a.x, &rv = a.residual, &wv = a.weight, &ov = a.out;
  const int64_t d = a.d;
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
  plugin_common::RopeArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckRope(kFloatDtype, q, k, positions, inv_freq, &a));
  const TensorView &qv = a.q, &kv = a.k, &pv = a.positions, &fv = a.inv_freq;
  const int64_t d = qv.shape[2], r = fv.rows;
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
  plugin_common::SiluMulArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckSiluMul(kFloatDtype, x, out, &a));
  const TensorView &xv = a.x, &ov = a.out;
  const int64_t inter = a.inter;
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
