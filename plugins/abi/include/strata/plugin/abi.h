/*
 * strata engine plugin ABI, version 1.
 *
 * A plugin is a shared library that exports one C symbol,
 *
 *     const strata_plugin_api_v1* strata_plugin_get_api(void);
 *
 * returning a pointer to a static table of function pointers. Only C types cross this
 * boundary: plugins may be built with any compiler and C++ standard library.
 *
 * Conventions (every op):
 *  - Return STRATA_OK or an error code; on error, `last_error(backend)` returns a
 *    NUL-terminated message owned by the backend, valid until the next call on that backend
 *    from the same thread (a backend used from several threads keeps one message per thread).
 *    A failing op writes nothing. A dtype the backend does not implement for a valid request
 *    is STRATA_ERR_UNSUPPORTED; a dtype that makes no sense for the argument (e.g. I32
 *    weights) is STRATA_ERR_INVALID_ARGUMENT.
 *  - All data pointers inside strata_tensor / strata_kv_cache / index arrays are *device*
 *    pointers obtained from `alloc` (for the CPU plugin device memory is host memory).
 *  - Ops are enqueued on `stream` and may run asynchronously; results are visible to the host
 *    after `stream_synchronize`. The host never calls two ops on the same stream concurrently.
 *    Distinct streams may be used from distinct threads.
 *  - Tensors are row-major. The innermost dimension is always dense (element stride 1).
 *    `row_stride` is the stride, in elements, of dimension 0 (the token dimension); all
 *    dimensions between 0 and the innermost are dense. This lets the host pass the q/k/v
 *    column slices of one fused QKV projection without copies. row_stride == 0 means dense.
 *  - Index arrays (token ids, positions, block tables, lengths) are int32 device arrays.
 *  - Floating point ops accumulate in fp32 whatever the storage dtype.
 *
 * KV cache layout (one pool per model, shared by all layers):
 *     cache[num_blocks][num_layers][2 (K then V)][block_size][num_kv_heads][head_dim]
 * so one block holds every layer of `block_size` tokens contiguously and moves as one
 * transfer. Block b, layer l, K or V (kv = 0/1) starts at element
 *     ((b * num_layers + l) * 2 + kv) * block_size * num_kv_heads * head_dim.
 */
#ifndef STRATA_PLUGIN_ABI_H_
#define STRATA_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_PLUGIN_API_VERSION 1u
#define STRATA_PLUGIN_ENTRY_SYMBOL "strata_plugin_get_api"
#define STRATA_MAX_DIMS 4

#if defined(_WIN32)
#define STRATA_PLUGIN_EXPORT __declspec(dllexport)
#else
#define STRATA_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_ERR_INVALID_ARGUMENT = 1, /* bad shape, dtype, pointer or parameter */
  STRATA_ERR_OUT_OF_MEMORY = 2,
  STRATA_ERR_UNSUPPORTED = 3, /* valid request this backend does not implement */
  STRATA_ERR_INTERNAL = 4
} strata_status;

typedef enum strata_dtype {
  STRATA_DTYPE_F32 = 0,
  STRATA_DTYPE_F16 = 1,
  STRATA_DTYPE_BF16 = 2,
  STRATA_DTYPE_I32 = 3
} strata_dtype;

typedef struct strata_backend_s* strata_backend; /* opaque, owned by the plugin */
typedef struct strata_stream_s* strata_stream;   /* opaque, owned by the plugin */
typedef struct strata_graph_s* strata_graph;     /* opaque, owned by the plugin */

typedef struct strata_tensor {
  void* data;
  strata_dtype dtype;
  int32_t ndim;
  int64_t shape[STRATA_MAX_DIMS];
  int64_t row_stride; /* elements between consecutive indices of dim 0; 0 = dense */
} strata_tensor;

typedef struct strata_kv_cache {
  void* data; /* base of the pool, layout in the header comment */
  strata_dtype dtype;
  int32_t num_blocks;
  int32_t num_layers;
  int32_t block_size; /* tokens per block */
  int32_t num_kv_heads;
  int32_t head_dim;
} strata_kv_cache;

/* A batch of sequences for attention. Arrays are int32 device arrays.
 * Sequence s owns query rows [q_start[s], q_start[s+1]) of q/out; its context (cached prefix
 * plus the new tokens, whose K/V must already be in the cache) has kv_len[s] tokens, held in
 * blocks block_tables[s * max_blocks_per_seq + i]. The query row j of sequence s sits at
 * absolute position kv_len[s] - (q_start[s+1] - q_start[s]) + j, and attends causally to
 * positions <= its own (and > own - sliding_window when sliding_window > 0). Table entries
 * past ceil(kv_len[s] / block_size) may hold anything and must not be dereferenced. */
typedef struct strata_attention_batch {
  int32_t num_seqs;
  int32_t max_blocks_per_seq;
  int32_t max_q_len;           /* max over s of query rows; a hint for scheduling */
  int32_t max_kv_len;          /* max over s of kv_len; a hint for scheduling */
  const int32_t* q_start;      /* [num_seqs + 1] */
  const int32_t* kv_len;       /* [num_seqs] */
  const int32_t* block_tables; /* [num_seqs * max_blocks_per_seq] */
} strata_attention_batch;

typedef struct strata_attention_params {
  int32_t layer;
  float scale;            /* softmax scale, usually 1/sqrt(head_dim) */
  int32_t sliding_window; /* 0 = full attention */
} strata_attention_params;

typedef struct strata_backend_info {
  const char* name;          /* e.g. "cpu", "cuda" */
  const char* device_name;   /* human readable */
  strata_dtype weight_dtype; /* dtype the host must upload weights in */
  strata_dtype act_dtype;    /* dtype of activations the host allocates */
  strata_dtype kv_dtype;     /* dtype of the KV cache pool */
  uint64_t total_memory;     /* bytes of device memory */
  uint64_t free_memory;      /* bytes free at the time of the call */
} strata_backend_info;

/* Sampling request for one logits row (the `sample` op), in device memory. The rule is the
 * host sampler's (engine/include/strata/engine/sampling.h, after penalties):
 *  - temperature == 0: the argmax (ties: lowest id);
 *  - else x = logits / temperature (fp32); candidates in descending x (ties: lowest id first);
 *    keep the first top_k (when 0 < top_k < vocab); p = softmax of the kept (computed as
 *    exp(double(x) - max) / sum, in double); top_p < 1: keep the shortest prefix whose
 *    cumulative p >= top_p (at least one); min_p > 0: of those, keep the leading ones with
 *    p >= min_p * p[0]; renormalize; the token is the first candidate whose cumulative
 *    probability exceeds `uniform` (the last kept one if rounding leaves none).
 * Sums may be taken in any order: a draw within ~1e-12 of a boundary may land on either side. */
typedef struct strata_sample_params {
  float temperature;    /* >= 0; 0: greedy */
  int32_t top_k;        /* <= 0: off */
  float top_p;          /* (0, 1]; 1: off */
  float min_p;          /* [0, 1]; 0: off */
  double uniform;       /* this row's draw in [0, 1) from the host's seeded generator */
  int32_t num_logprobs; /* -1: none; 0..STRATA_MAX_LOGPROBS: the chosen token's and the top n */
  int32_t reserved;     /* 0 */
} strata_sample_params;

#define STRATA_MAX_LOGPROBS 20

/* Bytes of an opaque inter-process memory handle (ipc_export / ipc_open). */
#define STRATA_IPC_HANDLE_BYTES 64

/* One contiguous byte range of a batched copy (copy_runs). */
typedef struct strata_copy_run {
  uint64_t src_offset; /* bytes from the source base */
  uint64_t dst_offset; /* bytes from the destination base */
  uint64_t bytes;      /* > 0 */
} strata_copy_run;

typedef struct strata_plugin_api_v1 {
  uint32_t api_version; /* == STRATA_PLUGIN_API_VERSION */
  uint32_t struct_size; /* sizeof(strata_plugin_api_v1) as the plugin was built */
  const char* plugin_name;

  /* --- lifecycle ------------------------------------------------------------------ */
  /* `config_json` may be NULL or a JSON object of backend options (e.g. {"threads":4,
   * "device":0}); unknown keys are ignored. When create fails, last_error(NULL) returns its
   * message (valid until the next failing call on the same thread). */
  strata_status (*create)(const char* config_json, strata_backend* out);
  void (*destroy)(strata_backend backend);
  const char* (*last_error)(strata_backend backend);
  strata_status (*get_info)(strata_backend backend, strata_backend_info* out);

  /* --- memory and streams ----------------------------------------------------------- */
  strata_status (*alloc)(strata_backend backend, size_t bytes, void** out);
  void (*free)(strata_backend backend, void* ptr);
  strata_status (*stream_create)(strata_backend backend, strata_stream* out);
  void (*stream_destroy)(strata_backend backend, strata_stream stream);
  strata_status (*stream_synchronize)(strata_backend backend, strata_stream stream);
  strata_status (*copy_h2d)(strata_backend b, strata_stream s, void* dst, const void* src,
                            size_t bytes);
  strata_status (*copy_d2h)(strata_backend b, strata_stream s, void* dst, const void* src,
                            size_t bytes);
  strata_status (*copy_d2d)(strata_backend b, strata_stream s, void* dst, const void* src,
                            size_t bytes);

  /* --- dense ops ----------------------------------------------------------------------- */
  /* out[t, :] = table[ids[t], :]. table [V, H], ids int32 [T], out [T, H]. */
  strata_status (*embedding)(strata_backend b, strata_stream s, const strata_tensor* table,
                             const strata_tensor* ids, strata_tensor* out);
  /* RMSNorm over the innermost dim of x ([T, H] or [T, heads, D]); weight [H or D].
   * If residual != NULL: residual = residual + x first (in place), then out = norm(residual).
   * out may alias x. out = x * rsqrt(mean(x^2) + eps) * weight, computed in fp32. */
  strata_status (*rms_norm)(strata_backend b, strata_stream s, const strata_tensor* x,
                            strata_tensor* residual, const strata_tensor* weight, float eps,
                            strata_tensor* out);
  /* out[M, N] = x[M, K] * w[N, K]^T (+ bias[N]) (+ out if accumulate != 0).
   * w is an nn.Linear weight as stored by Hugging Face. */
  strata_status (*gemm)(strata_backend b, strata_stream s, const strata_tensor* x,
                        const strata_tensor* w, const strata_tensor* bias, int32_t accumulate,
                        strata_tensor* out);
  /* Rotary embedding in place, "rotate half" (GPT-NeoX) pairing over the first
   * 2 * inv_freq.shape[0] dims of each head: q [T, Hq, D], k [T, Hk, D], positions int32 [T],
   * inv_freq f32 [R]. angle = (float)positions[t] * inv_freq[i], an fp32 product as in
   * Hugging Face transformers (a double product differs by ~2e-4 rad at position 4k);
   * (x[i], x[i+R]) -> mscale * (x[i] cos - x[i+R] sin, x[i+R] cos + x[i] sin). q and k may
   * have different row strides; k may be NULL. */
  strata_status (*rope)(strata_backend b, strata_stream s, strata_tensor* q, strata_tensor* k,
                        const strata_tensor* positions, const strata_tensor* inv_freq,
                        float mscale);
  /* out[T, I] = silu(x[T, 0:I]) * x[T, I:2I]  (gate first, then up). */
  strata_status (*silu_mul)(strata_backend b, strata_stream s, const strata_tensor* x,
                            strata_tensor* out);
  /* out[n, :] = x[rows[n], :]. rows int32 [N]. Used to pick the rows that produce logits. */
  strata_status (*gather_rows)(strata_backend b, strata_stream s, const strata_tensor* x,
                               const strata_tensor* rows, strata_tensor* out);

  /* --- KV cache and attention --------------------------------------------------------- */
  /* Write new keys/values of `layer`: k, v [T, Hk, D]; slots int32 [T] where slot =
   * block * block_size + offset. A negative slot skips the row. */
  strata_status (*kv_append)(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                             int32_t layer, const strata_tensor* k, const strata_tensor* v,
                             const strata_tensor* slots);
  /* Causal paged attention for a batch of sequences (see strata_attention_batch).
   * q, out [T, Hq, D], Hq a multiple of the cache's num_kv_heads (GQA). */
  strata_status (*attention_prefill)(strata_backend b, strata_stream s,
                                     const strata_kv_cache* cache,
                                     const strata_attention_batch* batch,
                                     const strata_attention_params* params, const strata_tensor* q,
                                     strata_tensor* out);
  /* Same contract with exactly one query row per sequence (q_start[s] == s). */
  strata_status (*attention_decode)(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                                    const strata_attention_batch* batch,
                                    const strata_attention_params* params, const strata_tensor* q,
                                    strata_tensor* out);
  /* Copy whole blocks (all layers): for i < n, block dst[i] = block src[i]. int32 arrays.
   * No block may appear in both lists, and dst may not repeat (the host guarantees it). */
  strata_status (*kv_copy_blocks)(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                                  const strata_tensor* src_blocks, const strata_tensor* dst_blocks);
  /* Pack blocks[i] (whole blocks) into the contiguous buffer `dst` in order. */
  strata_status (*kv_gather)(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                             const strata_tensor* blocks, void* dst);
  /* Unpack the contiguous buffer `src` into blocks[i] in order. */
  strata_status (*kv_scatter)(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                              const strata_tensor* blocks, const void* src);

  /* --- mixture of experts (optional: NULL if the plugin has no MoE support) -------------- */
  /* Softmax over router_logits [T, E] (fp32 math), pick the top_k experts per row (ties:
   * lower expert id first), renormalize the k weights to sum 1 if renormalize != 0.
   * topk_weights f32 [T, k], topk_ids int32 [T, k], sorted by descending weight. */
  strata_status (*moe_route)(strata_backend b, strata_stream s, const strata_tensor* router_logits,
                             int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                             strata_tensor* topk_ids);
  /* out[t] = sum_j topk_weights[t, j] * Expert_{topk_ids[t, j]}(x[t]) where
   * Expert_e(x) = w_down[e] * (silu(w_gate_up[e, 0:I] x) * (w_gate_up[e, I:2I] x)).
   * x [T, H]; w_gate_up [E, 2I, H]; w_down [E, H, I]; out [T, H]. */
  strata_status (*moe_experts)(strata_backend b, strata_stream s, const strata_tensor* x,
                               const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                               const strata_tensor* w_gate_up, const strata_tensor* w_down,
                               strata_tensor* out);

  /* --- sampling (optional: NULL when the plugin does not sample; the host then copies the
   * logits back and samples on the host) --------------------------------------------------
   * Entries from here on are optional and may lie beyond a table built against an older
   * header (struct_size tells; the host treats them as NULL).
   * For each row r of logits [N, V] (F32 or the backend's act dtype), with params[r] (a device
   * array of N strata_sample_params): tokens int32 [N] gets the sampled id. When a row's
   * num_logprobs n >= 0, logprobs f32 [N, 1 + STRATA_MAX_LOGPROBS] gets in column 0 the chosen
   * token's log-probability under log_softmax(logits[r]) (the raw row: no temperature) and in
   * columns 1..n the top n of that distribution (descending, ties: lowest id), whose ids go to
   * top_ids int32 [N, STRATA_MAX_LOGPROBS] columns 0..n-1; other entries are left as they
   * are. logprobs and top_ids may be NULL when no row asks for logprobs. */
  strata_status (*sample)(strata_backend b, strata_stream s, const strata_tensor* logits,
                          const strata_sample_params* params, strata_tensor* tokens,
                          strata_tensor* logprobs, strata_tensor* top_ids);

  /* --- step replay (optional: all four NULL when the plugin cannot replay) ------------------
   * graph_capture_begin(s): the ops the host enqueues on `s` from now until
   * graph_capture_end(s) are recorded, not run; graph_capture_end hands the recording back as
   * a graph (or, when an op failed while recording, ends the recording and returns an error).
   * graph_launch(s, g) runs the recorded ops again with the arguments they had when recorded:
   * the same device pointers (the host rewrites inputs in place before each launch) and the
   * same host-side values (shapes, attention hints). Only compute ops may be recorded: no
   * alloc, copy or synchronize between begin and end. graph_launch returns
   * STRATA_ERR_UNSUPPORTED when `g` can no longer be replayed (e.g. scratch memory its ops use
   * was reallocated since it was recorded): the host destroys it and records again. */
  strata_status (*graph_capture_begin)(strata_backend b, strata_stream s);
  strata_status (*graph_capture_end)(strata_backend b, strata_stream s, strata_graph* out);
  strata_status (*graph_launch)(strata_backend b, strata_stream s, strata_graph g);
  void (*graph_destroy)(strata_backend b, strata_graph g);

  /* --- fused attention prologue (optional: NULL when absent; the host then calls the ops it
   * stands for) -------------------------------------------------------------------------------
   * The work between a layer's QKV projection and its attention, as one op. Exactly
   *     if (q_norm != NULL) rms_norm(q, NULL, q_norm, eps, q), rms_norm(k, NULL, k_norm, eps, k);
   *     rope(q, k, positions, inv_freq, mscale); kv_append(cache, layer, k, v, slots);
   * on q [T, Hq, D], k and v [T, Hk, D] (q and k updated in place; k is what gets appended),
   * with the arguments and rules of those ops; q_norm and k_norm [D] are both given or both
   * NULL. A failing call writes nothing. */
  strata_status (*attention_prologue)(strata_backend b, strata_stream s, strata_tensor* q,
                                      strata_tensor* k, const strata_tensor* v,
                                      const strata_tensor* q_norm, const strata_tensor* k_norm,
                                      float eps, const strata_tensor* positions,
                                      const strata_tensor* inv_freq, float mscale,
                                      const strata_kv_cache* cache, int32_t layer,
                                      const strata_tensor* slots);

  /* --- page-locked host memory (optional: both NULL when absent) ---------------------------
   * host_register(ptr, bytes) page-locks the host range [ptr, ptr + bytes) and makes it
   * directly reachable by the device's copy engines, so copy_d2h / copy_h2d to or from it run
   * asynchronously on their stream (a copy to or from pageable memory may block the host until
   * it is done); the range must stay untouched by the host while such a copy is in flight
   * (until stream_synchronize). host_unregister(ptr) undoes it; ptr is a value passed to
   * host_register, and no copy on the range may be in flight. */
  strata_status (*host_register)(strata_backend b, void* ptr, size_t bytes);
  void (*host_unregister)(strata_backend b, void* ptr);

  /* --- fused gated-MLP input (optional: NULL when absent; the host then calls the ops) -----
   * Exactly
   *     gemm(x, w_gate_up, bias, 0, scratch); silu_mul(scratch, out);
   * with x [T, H], w_gate_up [2I, H] (the gate rows, then the up rows), bias [2I] or NULL,
   * scratch [T, 2I] and out [T, I], all dense but x, with those ops' rules and roundings (the
   * projection is rounded to the act dtype before the activation). The backend may leave
   * scratch untouched (a fused kernel) or use it; its contents afterwards are unspecified.
   * A failing call writes nothing to out. */
  strata_status (*gemm_silu_mul)(strata_backend b, strata_stream s, const strata_tensor* x,
                                 const strata_tensor* w_gate_up, const strata_tensor* bias,
                                 strata_tensor* scratch, strata_tensor* out);

  /* --- routed experts in one call (optional: NULL when absent; the host then calls the ops) ---
   * Exactly
   *     moe_route(router_logits, top_k, renormalize, topk_weights, topk_ids);
   *     moe_experts(x, topk_weights, topk_ids, w_gate_up, w_down, out);
   * with those ops' arguments, rules and roundings; router_logits [T, E] has one column per
   * expert of w_gate_up, and out overlaps none of x, router_logits, topk_weights and
   * topk_ids. topk_weights and topk_ids
   * get the routing, as moe_route writes it. A failing call writes nothing. (A backend can
   * then route inside its expert kernels instead of in a kernel of its own.) */
  strata_status (*moe_route_experts)(strata_backend b, strata_stream s, const strata_tensor* x,
                                     const strata_tensor* router_logits, int32_t top_k,
                                     int32_t renormalize, strata_tensor* topk_weights,
                                     strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                                     const strata_tensor* w_down, strata_tensor* out);

  /* --- device memory shared between processes (optional: all three NULL when absent) -------
   * ipc_export(b, ptr, handle) writes STRATA_IPC_HANDLE_BYTES opaque bytes naming the whole
   * allocation `ptr` (a value returned by alloc on b), which another process on the same host
   * passes to ipc_open. The handle stays valid while the allocation lives.
   * ipc_open(b, handle, out) maps an allocation another process exported; *out is its base,
   * device memory of b until ipc_close(b, *out) (destroy closes what is left open).
   * STRATA_ERR_UNSUPPORTED when this backend cannot reach that memory (another host, a device
   * without peer access, or the exporting process itself). Opening the same handle twice
   * without closing may fail. */
  strata_status (*ipc_export)(strata_backend b, void* ptr,
                              uint8_t handle[STRATA_IPC_HANDLE_BYTES]);
  strata_status (*ipc_open)(strata_backend b, const uint8_t handle[STRATA_IPC_HANDLE_BYTES],
                            void** out);
  void (*ipc_close)(strata_backend b, void* ptr);

  /* --- batched copy (optional: NULL when absent) --------------------------------------------
   * For i < n: copy runs[i].bytes bytes from src + runs[i].src_offset to
   * dst + runs[i].dst_offset, enqueued on s as one batched operation (never one device call
   * per run). dst and src are each device memory of b (from alloc or ipc_open) or host memory
   * registered with host_register (for a backend whose device memory is host memory, any
   * host memory). `runs` is a host array the call does not keep. Destination ranges overlap
   * neither each other nor any source range. n == 0 does nothing. A failing call writes
   * nothing. */
  strata_status (*copy_runs)(strata_backend b, strata_stream s, void* dst, const void* src,
                             const strata_copy_run* runs, int64_t n);

  /* --- token masks (optional: NULL when absent; the host then samples masked rows itself) ----
   * Constrained decoding: for each i < n, where rows int32 [n] and masks int32 [n, W] with
   * W = ceil(V / 32): when 0 <= rows[i] < N, every entry v of row rows[i] of logits [N, V]
   * (F32 or the backend's act dtype) whose bit (uint32_t(masks[i, v / 32]) >> (v % 32)) & 1
   * is clear becomes -inf; entries whose bit is set keep their value. Entries i whose rows[i]
   * lies outside [0, N) do nothing (a fixed-size list with unused places, e.g. in a recorded
   * graph). A row listed twice keeps only what both masks allow. Bits past V are ignored.
   * rows and masks are device arrays, read by the device, not by the host. A failing call
   * writes nothing. */
  strata_status (*mask_logits)(strata_backend b, strata_stream s, strata_tensor* logits,
                               const strata_tensor* rows, const strata_tensor* masks);
} strata_plugin_api_v1;

typedef const strata_plugin_api_v1* (*strata_plugin_get_api_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_PLUGIN_ABI_H_ */
