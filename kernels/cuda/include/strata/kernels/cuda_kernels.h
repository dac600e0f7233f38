#pragma once
// Launchers of the plugin's CUDA kernels (kernels_*.cu). Each takes already validated shapes,
// enqueues its kernel(s) on `stream` and returns the launch's cudaError_t. Pointers are device
// pointers; strides are in elements between consecutive rows. Index values read on the device
// (ids, slots, block tables, batch arrays) are bounds-checked there: an out-of-range entry is
// skipped, never dereferenced.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "strata/plugin/abi.h"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

struct CacheDims {
  int64_t num_blocks = 0;
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

// ---- dense (kernels_dense.cu) ------------------------------------------------------------

// dst[i, :cols] = src[ids[i], :cols] for i < n; rows with ids outside [0, src_rows) are skipped.
cudaError_t LaunchGatherRows(const bf16* src, int64_t src_stride, int64_t src_rows,
                             const int32_t* ids, int64_t n, int64_t cols, bf16* dst,
                             int64_t dst_stride, cudaStream_t stream);

// Per row and per head of d elements: residual += x (if residual), out = norm * weight.
cudaError_t LaunchRmsNorm(const bf16* x, int64_t x_stride, bf16* residual, int64_t res_stride,
                          const bf16* weight, float eps, int64_t rows, int64_t heads, int64_t d,
                          bf16* out, int64_t out_stride, cudaStream_t stream);

// Rotate-half RoPE in place on q [rows, hq, d] and k [rows, hk, d] (k may be NULL).
cudaError_t LaunchRope(bf16* q, int64_t q_stride, int64_t hq, bf16* k, int64_t k_stride, int64_t hk,
                       int64_t d, const int32_t* positions, const float* inv_freq, int64_t r,
                       int64_t rows, float mscale, cudaStream_t stream);

// out[t, i] = silu(x[t, i]) * x[t, inter + i].
cudaError_t LaunchSiluMul(const bf16* x, int64_t x_stride, int64_t rows, int64_t inter, bf16* out,
                          int64_t out_stride, cudaStream_t stream);

// out[t, j] = (zero_first ? 0 : out[t, j]) + (bias ? bias[j] : 0).
cudaError_t LaunchBiasEpilogue(bf16* out, int64_t out_stride, int64_t rows, int64_t n,
                               const bf16* bias, bool zero_first, cudaStream_t stream);

// The shape both weight-streaming gemm kernels (the GEMV and the skinny one below) need: 1 <= n
// < 2^30, 8 <= k < 2^30, k and the row strides multiples of 8, x and w 16-byte aligned.
bool WeightStreamShape(int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                       int64_t ldw);

// ---- gemm at decode-sized M (kernels_gemv.cu) ---------------------------------------------
// out[m] = (accumulate ? out[m] : 0) + x[m] w^T (+ bias), w [n, k] row-major, for m <=
// kGemvMaxRows: warps streaming weight rows, every weight byte read once, fp32 sums rounded
// once. GemvServes says whether `gemm` takes it: m <= kGemvGemmRows (where gemm_bench measured
// it ahead of cuBLAS), k and the row strides multiples of 8, x and w 16-byte aligned; other
// calls go to cuBLAS. early_weights (here and in the skinny launchers below): w is not written
// by the kernel enqueued just before on the stream, so the kernel may start reading it before
// that kernel is done (programmatic dependent launch; x and out are read after it).
inline constexpr int64_t kGemvMaxRows = 4;
inline constexpr int64_t kGemvGemmRows = 2;
bool GemvServes(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                int64_t ldw);
cudaError_t LaunchGemv(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                       int64_t ldw, const bf16* bias, bool accumulate, bf16* out, int64_t ldo,
                       bool early_weights, cudaStream_t stream);
// gemm_silu_mul for m <= kGemvGemmRows where GemvServes(m, 2 * inter, k, ...): out[m, c] =
// silu(g) * u with g, u the rounded projections of gate row c and up row c + inter (+ bias).
cudaError_t LaunchGemvSiluMul(int64_t m, int64_t inter, int64_t k, const bf16* x, int64_t ldx,
                              const bf16* w, int64_t ldw, const bf16* bias, bf16* out, int64_t ldo,
                              bool early_weights, cudaStream_t stream);

// ---- gemm at M up to 64 (kernels_skinny_gemm.cu) -------------------------------------------
// The same contract as LaunchGemv / LaunchGemvSiluMul for kGemvGemmRows < m <= kSkinnyGemmRows:
// tensor-core weight streaming, K split over a thread-block cluster, fp32 sums rounded once.
// SkinnyGemmServes also asks for at most 16 tiles of 128 columns (where the kernel measured
// ahead of cuBLAS); for gemm_silu_mul pass n = 2 * inter. The launchers take any n up to one
// wave of tiles (2 x SM count).
inline constexpr int64_t kSkinnyGemmRows = 64;
bool SkinnyGemmServes(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                      int64_t ldw);
cudaError_t LaunchSkinnyGemm(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx,
                             const bf16* w, int64_t ldw, const bf16* bias, bool accumulate,
                             bf16* out, int64_t ldo, bool early_weights, cudaStream_t stream);
// Rows 17-64 run on wgmma where WgmmaAvailable(); false sends them to the mma.sync kernel too
// (for gemm_bench's same-run comparison).
void SetSkinnyWgmmaEnabled(bool enabled);
// gemm_silu_mul's rule: SkinnyGemmServes(m, 2 * inter, ...), or 33-64 rows on wgmma with more
// tiles (an 8-stage ring at one CTA per SM: the fused silu saves cuBLAS's [M, 2I] round trip
// and the silu_mul kernel).
bool SkinnyGemmSiluServes(int64_t m, int64_t inter, int64_t k, const bf16* x, int64_t ldx,
                          const bf16* w, int64_t ldw);
cudaError_t LaunchSkinnyGemmSiluMul(int64_t m, int64_t inter, int64_t k, const bf16* x, int64_t ldx,
                                    const bf16* w, int64_t ldw, const bf16* bias, bf16* out,
                                    int64_t ldo, bool early_weights, cudaStream_t stream);

// ---- KV cache and MoE routing (kernels_kv_moe.cu)
// -------------------------------------------------

// Writes k, v [rows, Hk, D] of `layer` at slots[t]; negative or out-of-pool slots skip the row.
cudaError_t LaunchKvAppend(bf16* cache, const CacheDims& dims, int64_t layer, const bf16* k,
                           int64_t k_stride, const bf16* v, int64_t v_stride, const int32_t* slots,
                           int64_t rows, cudaStream_t stream);

// Copies n whole blocks of `block_bytes`. With src_ids and dst_ids: pool block src_ids[i] to
// pool block dst_ids[i]; with src_ids only: pool to packed[i]; with dst_ids only: packed[i] to
// pool. Ids outside [0, num_blocks) skip their block.
cudaError_t LaunchCopyBlocks(char* pool, int64_t block_bytes, int64_t num_blocks,
                             const int32_t* src_ids, const int32_t* dst_ids, char* packed,
                             int64_t n, cudaStream_t stream);

// ---- batched copies (kernels_copy.cu) --------------------------------------------------------
// One run of LaunchCopyRuns: its bytes go from src + src_offset to dst + dst_offset; `start` is
// where it begins in the concatenation of all runs (the sum of the bytes of the runs before it).
struct CopyRunSpan {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t start = 0;
};
// abi.h copy_runs between two bases the device reaches (device memory, IPC-mapped or mapped host
// memory) in one kernel: runs (device memory, n entries) with runs[0].start == 0 and strictly
// increasing starts, the last run ending at total_bytes. The concatenation is cut into 64 KiB
// tiles; each CTA finds a tile's runs by binary search over the starts. A segment moves in
// 16-byte words where its source and destination share their 16-byte alignment (every offset
// and length a multiple of 16 on 16-byte aligned bases), else in the widest word they share,
// down to single bytes. Destinations must not overlap each other or any source.
cudaError_t LaunchCopyRuns(char* dst, const char* src, const CopyRunSpan* runs, int64_t n,
                           uint64_t total_bytes, cudaStream_t stream);

// attention_prologue (abi.h) in one kernel: q/k RMSNorm (when q_norm is set), rope, and the
// k / v rows into the pool, bit for bit what the separate kernels compute. Only where
// AttentionPrologueFused(head_dim, rotary half): head_dim 64 or 128, the half a multiple of 32.
struct PrologueArgs {
  bf16* q = nullptr;
  int64_t q_stride = 0;
  int hq = 0;
  bf16* k = nullptr;
  int64_t k_stride = 0;
  int hk = 0;
  const bf16* v = nullptr;
  int64_t v_stride = 0;
  const bf16* q_norm = nullptr;  // both or neither
  const bf16* k_norm = nullptr;
  float eps = 0.0f;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int r = 0;  // rotary half (inv_freq entries)
  float mscale = 1.0f;
  bf16* cache = nullptr;
  CacheDims dims;
  int64_t layer = 0;
  const int32_t* slots = nullptr;
  int64_t rows = 0;
};
bool AttentionPrologueFused(int64_t head_dim, int64_t rotary_half);
cudaError_t LaunchAttentionPrologue(const PrologueArgs& args, cudaStream_t stream);

// Softmax + top-k per row of logits [rows, experts] (see abi.h moe_route).
cudaError_t LaunchMoeRoute(const bf16* logits, int64_t logits_stride, int64_t rows, int64_t experts,
                           int32_t top_k, bool renormalize, float* weights, int64_t weights_stride,
                           int32_t* ids, int64_t ids_stride, cudaStream_t stream);

// ---- moe_experts without a host round trip (kernels_moe_experts.cu) -------------------------
// out[t] = sum_j weights[t, j] * Expert_{ids[t, j]}(x[t]) (see abi.h moe_experts): a device-side
// counting sort of the assignments by expert, two grouped GEMMs over the sorted rows (bf16
// mma.sync, fp32 accumulation; the x row gather fused into the first, silu(gate) * up into its
// epilogue) and a weighted combine in fp32. An id outside [0, experts) contributes nothing.
// Plan, then run: the plan depends on host-side shapes only, so the launch can be captured in
// a CUDA graph; the run enqueues 4 kernels (2 on the vector path) and never synchronizes.
struct MoeExpertsArgs {
  const bf16* x = nullptr;
  int64_t x_stride = 0;
  int64_t rows = 0;  // tokens T
  int64_t hidden = 0;
  int64_t inter = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  const int32_t* topk_ids = nullptr;
  int64_t ids_stride = 0;
  const float* weights = nullptr;
  int64_t weights_stride = 0;
  const bf16* w_gate_up = nullptr;  // [experts, 2 * inter, hidden], rows dense
  int64_t gate_up_expert_stride = 0;
  const bf16* w_down = nullptr;  // [experts, hidden, inter], rows dense
  int64_t down_expert_stride = 0;
  bf16* out = nullptr;
  int64_t out_stride = 0;
};

// hidden and inter multiples of 8, 16-byte aligned x / out / weights with strides multiples of
// 8 elements, experts < 12288, rows * top_k <= 2^30. Anything else is not served.
bool MoeExpertsSupported(const MoeExpertsArgs& args);

// Kernels by size: at most kMoeVectorMaxAssignments (token, expert) assignments, and no more
// than there are experts, take the vector kernels (kernels_moe_vector.cu: warp dot products, no
// sort, the combine fused; decode, weight-bandwidth bound); else the tile shape goes by
// average rows per active expert: < 16
// small (16 x 32 tiles, deep rings), < 64 medium (32 x 32), else large (128 x 128: prefill,
// compute bound).
inline constexpr int64_t kMoeVectorMaxAssignments = 64;
inline constexpr int64_t kMoeMediumTileRows = 16;
inline constexpr int64_t kMoeLargeTileRows = 64;
enum class MoeTiles { kVector, kSmall, kMedium, kLarge };
// Benches only: false plans every call on the tiles (the same-run baseline of the vector path).
void SetMoeVectorKernelsEnabled(bool enabled);
// moe_route_experts on the vector path: the gate_up kernel routes each token from its router
// logits itself (moe_route.cuh, bit for bit moe_route's result) instead of reading topk_ids /
// topk_weights, and its first CTA writes the routing there (args.topk_ids / args.weights with
// their strides) for the down kernel. Serves experts <= kMoeVectorRouteMaxExperts and, as
// measured, single-token calls only: in the served Qwen3-30B-A3B step the fused pair gains at
// batch 1 but costs at batch 8, where a tensor-core router projection runs before it instead of
// the GEMV (NOTES.md).
inline constexpr int64_t kMoeVectorRouteMaxExperts = 256;
inline constexpr int64_t kMoeVectorRouteMaxRows = 1;
struct MoeVectorRouting {
  const bf16* logits = nullptr;  // [rows, experts]
  int64_t logits_stride = 0;
  bool renormalize = false;
};
// The vector path: act is [rows * top_k, inter] bf16 of workspace. Two kernels. `routing`:
// route in the kernels (see above); nullptr reads the routing from args.
cudaError_t LaunchMoeVector(const MoeExpertsArgs& args, void* act, cudaStream_t stream,
                            const MoeVectorRouting* routing = nullptr);

struct MoePlan {
  MoeTiles tiles = MoeTiles::kSmall;
  int32_t block_m = 0;    // rows per m-tile
  int64_t max_tiles = 0;  // bound on the m-tiles: ceil(T * k / block_m) + min(E, T * k)
  size_t workspace_bytes = 0;
};
cudaError_t PlanMoeExperts(const MoeExpertsArgs& args, MoePlan* plan);
// `workspace`: plan.workspace_bytes of device memory, 256-byte aligned, private to `stream`.
cudaError_t LaunchMoeExperts(const MoeExpertsArgs& args, const MoePlan& plan, void* workspace,
                             cudaStream_t stream);
// moe_route_experts: the routing of `routing.logits` (moe_route's rule, written to
// args.topk_ids / args.weights, which are outputs here), then the experts on it. Where the
// vector kernels route themselves (above) two kernels; otherwise LaunchMoeRoute, then
// LaunchMoeExperts.
cudaError_t LaunchMoeRouteExperts(const MoeExpertsArgs& args, const MoePlan& plan,
                                  const MoeVectorRouting& routing, void* workspace,
                                  cudaStream_t stream);

// ---- attention (kernels_attention.cu) -------------------------------------------------------

struct AttentionArgs {
  const bf16* q = nullptr;
  int64_t q_stride = 0;
  bf16* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;     // query rows T
  int64_t q_heads = 0;  // Hq, a multiple of dims.num_kv_heads
  const bf16* cache = nullptr;
  CacheDims dims;
  int64_t layer = 0;
  const int32_t* q_start = nullptr;
  const int32_t* kv_len = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t num_seqs = 0;
  int32_t max_blocks_per_seq = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;
  // Decode attention only: no op still running may write q_start, kv_len or block_tables, so
  // the kernel reads them before it waits for its predecessor (the plugin decides from the
  // stream's write history, as for a GEMM's weights).
  bool early_batch = false;
};

// Causal paged attention over every (query row, head); head_dim <= kMaxAttentionHeadDim.
inline constexpr int64_t kMaxAttentionHeadDim = 256;
cudaError_t LaunchAttention(const AttentionArgs& args, cudaStream_t stream);

// ---- decode attention, split-KV (kernels_decode_attention.cu) -------------------------------
// One query row per sequence (q_start[s] == s, as attention_decode promises). Plan, then run:
// the plan depends only on host-side shapes (num_seqs, heads, table capacity, the max_kv_len
// hint, the device's SM count), so a decode step can be planned once per batch-size bucket and
// its launch captured in a CUDA graph. A sequence that is not one row, or whose kv_len is
// outside [1, max_blocks_per_seq * block_size], is skipped (its out rows are not written).

// Largest GQA group (q heads per kv head) the split-KV kernel serves; larger groups, head dims
// other than 64 and 128, and a cache pointer not 16-byte aligned take LaunchAttention.
inline constexpr int64_t kMaxDecodeGroup = 8;
bool DecodeAttentionSupported(const AttentionArgs& args);

struct DecodePlan {
  int32_t splits = 1;          // KV splits per (sequence, kv head)
  int32_t chunk = 0;           // keys per split at max_kv_len_hint (the kernel sizes each
                               // sequence's splits from its own kv_len: ceil(kv_len / splits))
  int32_t warps = 4;           // warps per CTA: 4, or 8 (one CTA per SM)
  size_t workspace_bytes = 0;  // device scratch LaunchDecodeAttention needs (0: none)
};
// max_kv_len_hint <= 0: unknown (the table capacity bounds it). Correct for any kv_len values.
cudaError_t PlanDecodeAttention(const AttentionArgs& args, int32_t max_kv_len_hint,
                                DecodePlan* plan);
// `workspace`: plan.workspace_bytes of device memory, 16-byte aligned, private to `stream`.
// With `prologue` (attention_prologue's arguments, the op just before): the attention kernel
// runs it itself where DecodeAttentionRunsPrologue holds (head_dim 128, the same q, cache and
// layer, one row per sequence), else it is launched first on its own.
bool DecodeAttentionRunsPrologue(const AttentionArgs& args, const PrologueArgs& prologue);
cudaError_t LaunchDecodeAttention(const AttentionArgs& args, const DecodePlan& plan,
                                  void* workspace, cudaStream_t stream,
                                  const PrologueArgs* prologue = nullptr);
// Benchmarks: plan every call with 4- or 8-warp CTAs (any other value: the plan's own rule).
void SetDecodeAttentionWarps(int warps);

// ---- prefill attention, flash (kernels_prefill_attention.cu) -------------------------------
// Causal paged attention for a batch of variable-length sequences with cached prefixes (the
// attention_prefill contract), FlashAttention-2 style on the tensor cores: one CTA per
// (query tile, kv head), the kv head's whole GQA group packed into the tile's 128 rows, K/V
// tiles of 64 positions streamed from the cache. Needs head_dim 64 or 128, a GQA group <= 128,
// a power-of-two block_size, scale > 0, 16-byte aligned cache, q (and q_stride a multiple of 8
// elements) and 4-byte aligned out (even out_stride); anything else takes LaunchAttention. No
// host round trip, no workspace, no use of the batch hints. Same guards as LaunchAttention: a
// malformed sequence (q_start outside [0, rows], kv_len below its query rows or past its table)
// is skipped, a table entry outside the pool is masked and never dereferenced.
bool PrefillAttentionSupported(const AttentionArgs& args);
// Takes the wgmma kernel on compute capability 9.0 devices, the mma.sync kernel elsewhere.
cudaError_t LaunchPrefillAttention(const AttentionArgs& args, cudaStream_t stream);
// The two kernels by name (benchmarks compare them); same contract as LaunchPrefillAttention.
// mma.sync, any sm_90 device (kernels_prefill_attention.cu).
cudaError_t LaunchPrefillAttentionMma(const AttentionArgs& args, cudaStream_t stream);
// Hopper warpgroup MMA (wgmma), built for sm_90a only (kernels_prefill_attention_sm90a.cu);
// only where WgmmaAvailable(). Warp-specialized where the pool allows (block_size >= 8): a
// producer warp issues the K/V tiles' TMA loads into a ring of full / empty barriers; else every
// thread issues cp.async copies. The Cp form always takes the cp.async kernel (benchmarks).
cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& args, cudaStream_t stream);
cudaError_t LaunchPrefillAttentionWgmmaCp(const AttentionArgs& args, cudaStream_t stream);

// ---- Hopper-only kernels (sm_90a: kernels_*_sm90a.cu) ---------------------------------------
// True when the current device is compute capability 9.0 (the only one sm_90a code runs on)
// and the wgmma kernels are enabled. The launchers above take them where this holds.
bool WgmmaAvailable();
// On by default; benchmarks turn it off to time the portable kernels side by side.
void SetWgmmaKernelsEnabled(bool enabled);

// ---- sampling (kernels_sample.cu) ------------------------------------------------------------
// abi.h `sample` for rows of logits [rows, vocab] (bf16, or f32 when `f32`), one cluster of 8
// thread blocks per row (each keeps an eighth of the row in shared memory; rows wider than
// ~393k ids take LaunchSampleOneBlock's path); params (device) values outside their ranges are
// clamped. logprobs / top_ids may be NULL (then no row writes them).
cudaError_t LaunchSample(const void* logits, bool f32, int64_t stride, int64_t rows, int64_t vocab,
                         const strata_sample_params* params, int32_t* tokens, float* logprobs,
                         int64_t lp_stride, int32_t* top_ids, int64_t top_stride,
                         cudaStream_t stream);
// The same with one 1,024-thread block per row reading the row from global memory on every
// pass (any width; sample_bench times it beside the cluster path).
cudaError_t LaunchSampleOneBlock(const void* logits, bool f32, int64_t stride, int64_t rows,
                                 int64_t vocab, const strata_sample_params* params, int32_t* tokens,
                                 float* logprobs, int64_t lp_stride, int32_t* top_ids,
                                 int64_t top_stride, cudaStream_t stream);

// ---- token masks (kernels_mask.cu) ------------------------------------------------------------
// abi.h `mask_logits` over logits [num_rows, vocab] (bf16, or f32 when `f32`; `stride` elements
// between rows): for i < n, row rows[i * rows_stride] (skipped outside [0, num_rows)) gets -inf
// wherever bit v of masks[i * mask_stride + v / 32] is clear.
cudaError_t LaunchMaskLogits(void* logits, bool f32, int64_t stride, int64_t num_rows,
                             int64_t vocab, const int32_t* rows, int64_t rows_stride,
                             const uint32_t* masks, int64_t mask_stride, int64_t n,
                             cudaStream_t stream);

}  // namespace strata::cuda
