#pragma once
// The CPU plugin's ops, one per compute entry of strata_plugin_api_v1 (see abi.h for each
// contract). They run synchronously on the calling thread and the backend's pool, validate
// every argument first (nothing is written when validation fails), and return a Status whose
// message names the op and the argument. They may throw std::bad_alloc; the C entry points in
// cpu_plugin.cc turn that into STRATA_ERR_OUT_OF_MEMORY.
#include <cstdint>

#include "cpu_backend.h"
#include "cpu_common.h"
#include "strata/plugin/abi.h"

namespace strata::cpu {

// cpu_ops_dense.cc
Status Embedding(CpuBackend& be, const strata_tensor* table, const strata_tensor* ids,
                 strata_tensor* out);
Status RmsNorm(CpuBackend& be, const strata_tensor* x, strata_tensor* residual,
               const strata_tensor* weight, float eps, strata_tensor* out);
Status Rope(CpuBackend& be, strata_tensor* q, strata_tensor* k, const strata_tensor* positions,
            const strata_tensor* inv_freq, float mscale);
Status SiluMul(CpuBackend& be, const strata_tensor* x, strata_tensor* out);
Status GatherRows(CpuBackend& be, const strata_tensor* x, const strata_tensor* rows,
                  strata_tensor* out);

// cpu_ops_gemm.cc
Status Gemm(CpuBackend& be, const strata_tensor* x, const strata_tensor* w,
            const strata_tensor* bias, int32_t accumulate, strata_tensor* out);
// gemm into scratch, then silu_mul into out; validated up front.
Status GemmSiluMul(CpuBackend& be, const strata_tensor* x, const strata_tensor* w_gate_up,
                   const strata_tensor* bias, strata_tensor* scratch, strata_tensor* out);

// cpu_ops_kv.cc
Status KvAppend(CpuBackend& be, const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                const strata_tensor* v, const strata_tensor* slots);
// rms_norm of q and k (when the norms are given), rope, kv_append; validated up front.
Status AttentionPrologue(CpuBackend& be, strata_tensor* q, strata_tensor* k, const strata_tensor* v,
                         const strata_tensor* q_norm, const strata_tensor* k_norm, float eps,
                         const strata_tensor* positions, const strata_tensor* inv_freq,
                         float mscale, const strata_kv_cache* cache, int32_t layer,
                         const strata_tensor* slots);
Status KvCopyBlocks(CpuBackend& be, const strata_kv_cache* cache, const strata_tensor* src,
                    const strata_tensor* dst);
Status KvGather(CpuBackend& be, const strata_kv_cache* cache, const strata_tensor* blocks,
                void* dst);
Status KvScatter(CpuBackend& be, const strata_kv_cache* cache, const strata_tensor* blocks,
                 const void* src);

// cpu_ops_attention.cc; `decode` selects the attention_decode contract (one row per sequence).
Status Attention(CpuBackend& be, bool decode, const strata_kv_cache* cache,
                 const strata_attention_batch* batch, const strata_attention_params* params,
                 const strata_tensor* q, strata_tensor* out);

// cpu_ops_moe.cc
Status MoeRoute(CpuBackend& be, const strata_tensor* router_logits, int32_t top_k,
                int32_t renormalize, strata_tensor* topk_weights, strata_tensor* topk_ids);
Status MoeExperts(CpuBackend& be, const strata_tensor* x, const strata_tensor* topk_weights,
                  const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                  const strata_tensor* w_down, strata_tensor* out);
// moe_route then moe_experts (abi.h moe_route_experts), all checks first.
Status MoeRouteExperts(CpuBackend& be, const strata_tensor* x, const strata_tensor* router_logits,
                       int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                       strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                       const strata_tensor* w_down, strata_tensor* out);

// cpu_ops_sample.cc
Status Sample(CpuBackend& be, const strata_tensor* logits, const strata_sample_params* params,
              strata_tensor* tokens, strata_tensor* logprobs, strata_tensor* top_ids);
Status MaskLogits(CpuBackend& be, strata_tensor* logits, const strata_tensor* rows,
                  const strata_tensor* masks);

// Shared by gemm and the MoE experts: out[m, n] = x[m, :] . w[n, :] (+ bias[n])
// (+ out[m, n] if accumulate). Small m reads w once through the pool; larger m calls OpenBLAS
// sgemm from the calling thread (never from inside the pool).
void MatMulNT(CpuBackend& be, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
              const float* w, int64_t ldw, const float* bias, bool accumulate, float* out,
              int64_t ldo);

// Copies `bytes` bytes, split over the pool when large. Ranges must not overlap.
void ParallelCopy(CpuBackend& be, void* dst, const void* src, size_t bytes);

}  // namespace strata::cpu
