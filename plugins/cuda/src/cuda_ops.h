#pragma once
// The CUDA plugin's ops behind the ABI entries: each validates its arguments (shapes, strides,
// dtypes: everything the host can see without reading device memory), then enqueues its
// kernels or cuBLAS calls on `stream`. Nothing is enqueued when validation fails.
#include "cuda_backend.h"
#include "cuda_common.h"
#include "strata/plugin/abi.h"

namespace strata::cuda {

Status Embedding(Stream& s, const strata_tensor* table, const strata_tensor* ids,
                 strata_tensor* out);
Status RmsNorm(Stream& s, const strata_tensor* x, strata_tensor* residual,
               const strata_tensor* weight, float eps, strata_tensor* out);
Status Gemm(Stream& s, const strata_tensor* x, const strata_tensor* w, const strata_tensor* bias,
            int32_t accumulate, strata_tensor* out);
Status Rope(Stream& s, strata_tensor* q, strata_tensor* k, const strata_tensor* positions,
            const strata_tensor* inv_freq, float mscale);
Status SiluMul(Stream& s, const strata_tensor* x, strata_tensor* out);
// silu_mul(gemm(x, w_gate_up, bias)): fused at decode sizes, else through `scratch`.
Status GemmSiluMul(Stream& s, const strata_tensor* x, const strata_tensor* w_gate_up,
                   const strata_tensor* bias, strata_tensor* scratch, strata_tensor* out);
Status GatherRows(Stream& s, const strata_tensor* x, const strata_tensor* rows, strata_tensor* out);

Status KvAppend(Stream& s, const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                const strata_tensor* v, const strata_tensor* slots);
Status AttentionPrologue(Stream& s, strata_tensor* q, strata_tensor* k, const strata_tensor* v,
                         const strata_tensor* q_norm, const strata_tensor* k_norm, float eps,
                         const strata_tensor* positions, const strata_tensor* inv_freq,
                         float mscale, const strata_kv_cache* cache, int32_t layer,
                         const strata_tensor* slots);
Status Attention(Stream& s, bool decode, const strata_kv_cache* cache,
                 const strata_attention_batch* batch, const strata_attention_params* params,
                 const strata_tensor* q, strata_tensor* out);
Status KvCopyBlocks(Stream& s, const strata_kv_cache* cache, const strata_tensor* src,
                    const strata_tensor* dst);
Status KvGather(Stream& s, const strata_kv_cache* cache, const strata_tensor* blocks, void* dst);
Status KvScatter(Stream& s, const strata_kv_cache* cache, const strata_tensor* blocks,
                 const void* src);

// abi.h copy_runs (cuda_ops_copy.cc): dst and src device memory of the current device or
// page-locked host memory.
Status CopyRuns(Stream& s, void* dst, const void* src, const strata_copy_run* runs, int64_t n);

Status MoeRoute(Stream& s, const strata_tensor* router_logits, int32_t top_k, int32_t renormalize,
                strata_tensor* topk_weights, strata_tensor* topk_ids);
Status MoeExperts(Stream& s, const strata_tensor* x, const strata_tensor* topk_weights,
                  const strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                  const strata_tensor* w_down, strata_tensor* out);
// abi.h moe_route_experts: decode-sized calls route inside the vector expert kernels.
Status MoeRouteExperts(Stream& s, const strata_tensor* x, const strata_tensor* router_logits,
                       int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                       strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                       const strata_tensor* w_down, strata_tensor* out);

Status Sample(Stream& s, const strata_tensor* logits, const strata_sample_params* params,
              strata_tensor* tokens, strata_tensor* logprobs, strata_tensor* top_ids);
Status MaskLogits(Stream& s, strata_tensor* logits, const strata_tensor* rows,
                  const strata_tensor* masks);

// Step replay (cuda_graphs.cc): abi.h graph_capture_begin / _end / graph_launch / destroy.
Status GraphBegin(Stream& s);
Status GraphEnd(Stream& s, strata_graph* out);
Status GraphLaunch(Stream& s, strata_graph g);
void GraphDestroy(strata_graph g);

// out[m, n] (row stride ldo, dtype out_type) = x[m, k] (bf16, ldx) * w[n, k]^T (bf16, ldw)
// + beta * out, through cublasGemmEx with fp32 compute. Dimensions must fit in int.
Status GemmNT(const char* op, Stream& s, int64_t m, int64_t n, int64_t k, const void* x,
              int64_t ldx, const void* w, int64_t ldw, void* out, cudaDataType_t out_type,
              int64_t ldo, float beta);

}  // namespace strata::cuda
