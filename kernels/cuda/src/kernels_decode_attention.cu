// Paged decode attention: split-KV (flash-decoding) on the tensor cores.
//
// Grid (kv head, sequence, split): the kv heads of one sequence are neighbours in launch order,
// so they run together and read each block's interleaved head rows close in time
// (plugins/cuda/NOTES.md, "kv heads of a sequence side by side"). A CTA of 4
// or 8 warps serves the whole GQA group of its kv head (G <= 8 query heads), so every K/V byte of
// the split is read from memory once. The split's keys are cut into tiles of 16 positions, dealt
// round-robin to the warps; each warp streams its tiles through its own kStages-deep cp.async ring
// in shared memory (16-byte copies; a position outside the range or whose block id is outside the
// pool is zero-filled and masked) and keeps its own online softmax (fp32, exp2 domain):
//   S[16 x 16] = Q[16 rows: the group, zero-padded] x K_tile^T   (mma.m16n8k16 bf16, fp32 acc)
//   O[16 x D] += P (bf16) x V_tile                                 (same mma)
// Head dims are permuted inside the mma fragments so that every shared-memory read is one
// 16-byte access: the sum over d in Q.K does not care about the order of d, and the output
// column n of n-tile j is written back to dim n * (D / 8) + j. A per-key XOR swizzle of the
// 16-byte chunks keeps both read patterns free of bank conflicts.
// At the end the warps merge through shared memory; with one split the CTA writes bf16 out,
// otherwise it writes its normalized partial O and log2-sum-exp, and a combine kernel merges
// the splits. The split count comes from the host plan (PlanDecodeAttention).
// Both kernels are launched with programmatic dependent launch, so a grid is
// scheduled while its predecessor drains; without a sliding window the first tiles' block ids
// are read in parallel with kv_len, and both before the wait for the predecessor where no
// recent op wrote them (AttentionArgs::early_batch); the combine sums the splits with float4
// loads spread over the CTA's warps instead of one serial loop per thread.
#include <cuda_pipeline_primitives.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"
#include "prologue_head.cuh"

namespace strata::cuda {
namespace {

// Warps per CTA: 4 (two CTAs per SM at D = 128), or 8 (one CTA per SM, the same bytes in flight
// per SM) where one split of such CTAs fills the SMs in one wave (PlanDecodeAttention).
constexpr int kTileKeys = 16;
constexpr int kStages = 3;
// Keys per split below which a CTA is mostly prologue. Only few (sequence, kv head) items (small
// batches) reach it: ChooseSplits takes the fewest splits that fill the GPU. Shorter chunks
// give more CTAs at batch 1 but no gain (plugins/cuda/NOTES.md).
#ifndef STRATA_DECODE_MIN_CHUNK
#define STRATA_DECODE_MIN_CHUNK 256
#endif
constexpr int kMinChunk = STRATA_DECODE_MIN_CHUNK;
constexpr int64_t kMaxSplits = 1024;  // the combine kernel stages one float per split
constexpr int64_t kShortContext = 4096;  // PlanDecodeAttention: split plans up to here use 8 warps
constexpr float kLog2e = 1.4426950408889634f;

template <int kHeadDim>
struct Traits {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per K/V row
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kTileBytes = kTileKeys * kRowBytes;  // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kKSteps = kHeadDim / 16;       // Q.K mma steps over d
  static constexpr int kNTiles = kHeadDim / 8;        // P.V mma n-tiles over d
  static constexpr int kDimsPerGroup = kHeadDim / 8;  // output dims per lane group
  static constexpr int kVLoads = kDimsPerGroup / 8;   // 16-byte V loads per key per lane
  static_assert(kChunks >= 8 && kChunks <= 32 && 32 % kChunks == 0, "head_dim 64 or 128");
  // The merge buffer reuses the ring: warps x 8 rows of kMergeRow floats (a row's D values with
  // one pad float after every 32, so the fragment stores of one instruction hit 32 distinct
  // banks: lanes differ by row (stride D + D / 32 floats) and by 32-column group (+33)), then
  // m and l. Unpadded, each of those 32 stores was a 32-way bank conflict (ncu).
  static constexpr int kMergeRow = kHeadDim + kHeadDim / 32;
};

// Shared memory of a CTA of kWarps warps: the warps' rings, then their tile masks.
template <int kHeadDim, int kWarps>
struct Smem {
  using T = Traits<kHeadDim>;
  static constexpr int kMaskOffset = kWarps * T::kWarpBytes;
  static constexpr int kBytes = kMaskOffset + kWarps * kStages * 4;
  static_assert(kWarps * 8 * (T::kMergeRow + 2) * 4 <= kMaskOffset, "merge buffer");
};

// XOR applied to the 16-byte chunk index of key k (0..15) of a tile: keys 2i and 2i+1 land in
// different halves of a 128-byte bank window (Q.K reads), and keys 0,2,4,6 at chunk offsets 0
// and 2 cover all eight 16-byte bank slots (P.V reads).
__device__ __forceinline__ int Swizzle(int k) {
  return ((k >> 1) & 1) | ((((k >> 2) ^ k) & 1) << 2);
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// c += A[16x16] B[16x8] with the row-8..15 registers of A zero (a1 = a3 = 0).
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}


// The one query row of sequence s, and its context length, if the sequence is well formed
// (one row, 1 <= kv_len <= table capacity); otherwise false and nothing is written for it.
__device__ bool DecodeRow(const AttentionArgs& a, int s, int64_t* row, int64_t* kv_len) {
  *row = a.q_start[s];
  *kv_len = a.kv_len[s];
  return a.q_start[s + 1] - *row == 1 && *row >= 0 && *row < a.rows && *kv_len >= 1 &&
         *kv_len <= int64_t{a.max_blocks_per_seq} * a.dims.block_size;
}

// The block id holding position p0 + (lane & 15), or -1 past `hi`. Loaded one tile ahead of
// its copies so the table lookup's latency is not on the streaming path.
__device__ __forceinline__ int32_t TileBlock(const int32_t* table, int32_t p0, int32_t hi,
                                             int32_t bs, int lane) {
  const int32_t p = p0 + (lane & 15);
  return p < hi ? table[p / bs] : -1;
}

// Enqueues the K and V rows of positions [p0, p0 + 16) (block ids from TileBlock) into one
// ring slot and records which of the 16 keys are real in *mask. Called by all 32 lanes.
template <int kHeadDim>
__device__ void IssueTile(const AttentionArgs& a, int32_t block, int64_t head_off, int32_t p0,
                          unsigned char* slot, uint32_t* mask, int lane) {
  using T = Traits<kHeadDim>;
  const int32_t bs = static_cast<int32_t>(a.dims.block_size);
  const int64_t plane = a.dims.block_size * a.dims.num_kv_heads * kHeadDim;
  const int32_t p = p0 + (lane & 15);
  int64_t off = -1;
  if (block >= 0 && block < a.dims.num_blocks) {
    off = (int64_t{block} * a.dims.num_layers + a.layer) * 2 * plane +
          int64_t{p % bs} * a.dims.num_kv_heads * kHeadDim + head_off;
  }
  const uint32_t valid = __ballot_sync(0xffffffffu, off >= 0) & 0xffffu;
  if (lane == 0) *mask = valid;
  constexpr int kKeysPerPass = 32 / T::kChunks;
  const int chunk = lane % T::kChunks;
#pragma unroll
  for (int i = 0; i < kTileKeys / kKeysPerPass; ++i) {
    const int key = lane / T::kChunks + i * kKeysPerPass;
    const int64_t key_off = __shfl_sync(0xffffffffu, off, key);
    const bf16* src = a.cache + (key_off >= 0 ? key_off : 0) + chunk * 8;
    unsigned char* dst = slot + key * T::kRowBytes + ((chunk ^ Swizzle(key)) << 4);
    CopyAsync16(SmemAddress(dst), src, key_off >= 0);
    CopyAsync16(SmemAddress(dst + T::kTileBytes), src + plane, key_off >= 0);
  }
}

template <int kHeadDim>
__device__ __forceinline__ uint4 LoadChunk(const unsigned char* tile, int key, int chunk) {
  using T = Traits<kHeadDim>;
  return *reinterpret_cast<const uint4*>(tile + key * T::kRowBytes +
                                         ((chunk ^ Swizzle(key)) << 4));
}

// One warp's running state: O rows gid (c[0], c[1]; c[2], c[3] belong to the padding rows),
// the running max m (log2 domain) and this lane's share of the row sum l.
template <int kHeadDim>
struct WarpState {
  float o[Traits<kHeadDim>::kNTiles][4];
  float m;
  float l;
};

// Attends the warp's group rows to one landed tile (K at `ks`, V right after it).
template <int kHeadDim>
__device__ void ComputeTile(const uint32_t (&qf)[Traits<kHeadDim>::kKSteps][2],
                            const unsigned char* ks, uint32_t mask, float scale_log2,
                            WarpState<kHeadDim>& st, int lane) {
  using T = Traits<kHeadDim>;
  const int gid = lane / 4, t4 = lane % 4;
  float sc[2][4] = {};
#pragma unroll
  for (int kt = 0; kt < 2; ++kt) {
#pragma unroll
    for (int c = 0; c < kHeadDim / 32; ++c) {
      const uint4 k = LoadChunk<kHeadDim>(ks, kt * 8 + gid, c * 4 + t4);
      Mma(sc[kt], qf[2 * c][0], qf[2 * c][1], k.x, k.y);
      Mma(sc[kt], qf[2 * c + 1][0], qf[2 * c + 1][1], k.z, k.w);
    }
  }
  // Scores of keys 2t4, 2t4 + 1, 8 + 2t4, 9 + 2t4 for row gid.
  float x[4] = {sc[0][0], sc[0][1], sc[1][0], sc[1][1]};
  float tile_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = (i >> 1) * 8 + 2 * t4 + (i & 1);
    x[i] = (mask >> key) & 1u ? x[i] * scale_log2 : -INFINITY;
    tile_max = fmaxf(tile_max, x[i]);
  }
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
  const float m_new = fmaxf(st.m, tile_max);
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float corr = exp2f(st.m - m_use);
  float p[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = exp2f(x[i] - m_use);
  st.l = st.l * corr + (p[0] + p[1] + p[2] + p[3]);
  st.m = m_new;
  const uint32_t pa0 = PackBf16(p[0], p[1]), pa2 = PackBf16(p[2], p[3]);
  const unsigned char* vs = ks + T::kTileBytes;
#pragma unroll
  for (int v = 0; v < T::kVLoads; ++v) {
    const int chunk = gid * T::kVLoads + v;
    const uint4 va = LoadChunk<kHeadDim>(vs, 2 * t4, chunk);
    const uint4 vb = LoadChunk<kHeadDim>(vs, 2 * t4 + 1, chunk);
    const uint4 vc = LoadChunk<kHeadDim>(vs, 8 + 2 * t4, chunk);
    const uint4 vd = LoadChunk<kHeadDim>(vs, 9 + 2 * t4, chunk);
    const uint32_t wa[4] = {va.x, va.y, va.z, va.w}, wb[4] = {vb.x, vb.y, vb.z, vb.w};
    const uint32_t wc[4] = {vc.x, vc.y, vc.z, vc.w}, wd[4] = {vd.x, vd.y, vd.z, vd.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint32_t sel = (e & 1) ? 0x7632u : 0x5410u;
      float(&o)[4] = st.o[v * 8 + e];
      o[0] *= corr;
      o[1] *= corr;
      Mma(o, pa0, pa2, __byte_perm(wa[e / 2], wb[e / 2], sel),
          __byte_perm(wc[e / 2], wd[e / 2], sel));
    }
  }
}

// Merges the warps' states through shared memory and writes either bf16 out (one split) or
// the split's normalized partial O and log2-sum-exp.
template <int kHeadDim, int kWarps>
__device__ void MergeAndStore(const AttentionArgs& a, const WarpState<kHeadDim>& st,
                              unsigned char* smem, int group, int64_t row, int s, int kvh,
                              int split, int splits, float* part_o, float* part_lse) {
  using T = Traits<kHeadDim>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, t4 = lane % 4;
  float l = st.l;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* red = reinterpret_cast<float*>(smem);  // [warp][8 rows][kMergeRow]
  float* red_m = red + kWarps * 8 * T::kMergeRow;
  float* red_l = red_m + kWarps * 8;
  auto at = [](int w, int r, int d) { return (w * 8 + r) * T::kMergeRow + d + d / 32; };
  __syncthreads();  // every warp is done reading the ring
#pragma unroll
  for (int j = 0; j < T::kNTiles; ++j) {
    red[at(warp, gid, (2 * t4) * T::kDimsPerGroup + j)] = st.o[j][0];
    red[at(warp, gid, (2 * t4 + 1) * T::kDimsPerGroup + j)] = st.o[j][1];
  }
  if (t4 == 0) {
    red_m[warp * 8 + gid] = st.m;
    red_l[warp * 8 + gid] = l;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * kHeadDim; idx += blockDim.x) {
    const int r = idx / kHeadDim, d = idx % kHeadDim;
    float m_all = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, red_m[w * 8 + r]);
    float acc = 0.0f, sum = 0.0f;
    if (m_all != -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(red_m[w * 8 + r] - m_all);
        acc += f * red[at(w, r, d)];
        sum += f * red_l[w * 8 + r];
      }
    }
    const float value = sum > 0.0f ? acc / sum : 0.0f;
    const int64_t h = int64_t{kvh} * group + r;
    if (splits == 1) {
      a.out[row * a.out_stride + h * kHeadDim + d] = __float2bfloat16(value);
    } else {
      const int64_t at = (int64_t{s} * a.q_heads + h) * splits + split;
      part_o[at * kHeadDim + d] = value;
      if (d == 0) part_lse[at] = sum > 0.0f ? m_all + log2f(sum) : -INFINITY;
    }
  }
}

// attention_prologue inside the attention kernel (kPro): each CTA norms and ropes its group's q
// heads of the sequence's row into shared memory (split 0 also writes them back to q, as the
// op does), and the CTA whose split holds the new position (kv_len - 1) norms and ropes that
// row's k head, writes k back and both k and v into the pool, before any tile is read. The same
// arithmetic as the prologue kernel (prologue_head.cuh); rows that are not a well-formed decode
// sequence are left alone (the separate kernel would still rope them: a decode step has none).
template <int kHeadDim, int kWarps, bool kPro>
__device__ __forceinline__ void RunPrologue(const PrologueArgs& pro, bf16* qs, int64_t row, int kvh,
                                            int group, bool appends, bool write_q) {
  constexpr int kPerLane = kHeadDim / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float pos = static_cast<float>(pro.positions[row]);
  bf16* pool = appends ? PoolRow(pro, pro.slots[row]) : nullptr;
  const int64_t plane = pro.dims.block_size * pro.dims.num_kv_heads * kHeadDim;
  const int heads = group + (appends ? 2 : 0);
  for (int h = warp; h < heads; h += kWarps) {
    if (h == group + 1) {  // the v head: copied to the pool's V plane
      if (pool == nullptr) continue;
      const bf16* src = pro.v + row * pro.v_stride + int64_t{kvh} * kHeadDim;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        pool[plane + int64_t{kvh} * kHeadDim + lane + 32 * i] = src[lane + 32 * i];
      }
      continue;
    }
    const bool is_q = h < group;
    bf16* head = is_q ? pro.q + row * pro.q_stride + (int64_t{kvh} * group + h) * kHeadDim
                      : pro.k + row * pro.k_stride + int64_t{kvh} * kHeadDim;
    float x[kPerLane];
    LoadHead(head, x, lane);
    NormRopeHead(x, is_q ? pro.q_norm : pro.k_norm, pro.eps, pos, pro.inv_freq, pro.r, pro.mscale,
                 lane);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const bf16 y = __float2bfloat16(x[i]);
      if (is_q) {
        qs[h * kHeadDim + lane + 32 * i] = y;
        if (write_q) head[lane + 32 * i] = y;
      } else {
        head[lane + 32 * i] = y;
        if (pool != nullptr) pool[int64_t{kvh} * kHeadDim + lane + 32 * i] = y;
      }
    }
  }
  // The q rows for every warp, and the new k / v rows before this CTA's copies read them
  // (bar.sync orders the CTA's global writes before its later reads).
  __syncthreads();
}

template <int kHeadDim, int kWarps, bool kPro = false>
__global__ void __launch_bounds__(kWarps * 32)
    DecodeAttentionKernel(AttentionArgs a, int32_t chunk, int32_t splits, float* part_o,
                          float* part_lse, PrologueArgs pro) {
  using T = Traits<kHeadDim>;
  using L = Smem<kHeadDim, kWarps>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, t4 = lane % 4;
  const int kvh = blockIdx.x, s = blockIdx.y, split = blockIdx.z;
  const int32_t* table = a.block_tables + int64_t{s} * a.max_blocks_per_seq;
  const int32_t bs = static_cast<int32_t>(a.dims.block_size);
  // Without a sliding window the split's first position does not depend on kv_len when the
  // sequence fills the plan's chunks (always for split 0), so the block ids of the first
  // kStages tiles are looked up now, in parallel with the kv_len load (bounded by the table row
  // only; masked against kv_len below). Saves one round trip.
  const bool speculate = a.sliding_window <= 0;
  int32_t spec[kStages];
  int64_t row = 0, kv_len = 0;
  bool well_formed = false;
  auto read_batch = [&] {
#pragma unroll
    for (int i = 0; i < kStages; ++i) {
      const int64_t p =
          int64_t{split} * chunk + int64_t{warp + i * kWarps} * kTileKeys + (lane & 15);
      spec[i] = speculate && p < int64_t{a.max_blocks_per_seq} * bs
                    ? table[static_cast<int32_t>(p) / bs]
                    : -1;
    }
    well_formed = DecodeRow(a, s, &row, &kv_len);
  };
  // The batch arrays before the wait when no recent op wrote them (AttentionArgs::early_batch):
  // the kv_len and block-id round trip then overlaps the predecessor's tail. Every CTA still
  // waits before it lets its dependents start (the write history counts on that).
  if (a.early_batch) read_batch();
  WaitForPrerequisites();
  AllowDependents();
  if (!a.early_batch) read_batch();
  if (!well_formed) return;
  const int group = static_cast<int>(a.q_heads / a.dims.num_kv_heads);
  const int64_t first = a.sliding_window > 0 ? max(int64_t{0}, kv_len - a.sliding_window) : 0;
  // The split's keys are sized from this sequence's own length, not the plan's chunk: a plan
  // made for a longer context (graph replay plans for the context bucket) would otherwise leave
  // its last splits empty and the first ones full. Not below kMinChunk keys (or the plan's
  // chunk, if shorter): shorter splits' CTAs are mostly fixed cost.
  // 32-bit: kv_len < 2^31 (DecodeAttentionSupported); one split needs no division at all.
  const int32_t len = static_cast<int32_t>(kv_len - first);
  int32_t span = len;
  if (splits > 1) {
    span = max(((len + splits - 1) / splits + kTileKeys - 1) / kTileKeys * kTileKeys,
               min(kMinChunk, chunk));
  }
  const bool spec_ok = speculate && (split == 0 || span == chunk);
  const int64_t lo = first + int64_t{split} * span;
  const int64_t hi = min(kv_len, lo + span);
  const int n_tiles = hi > lo ? static_cast<int>((hi - lo + kTileKeys - 1) / kTileKeys) : 0;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;

  // With the prologue: the group's q rows (normed and roped) in shared memory, at the start of
  // warp 0's ring, which no copy fills before every warp has its fragments (the barrier below).
  bf16* qs = reinterpret_cast<bf16*>(smem);
  if constexpr (kPro) {
    RunPrologue<kHeadDim, kWarps, kPro>(pro, qs, row, kvh, group, hi == kv_len && lo < hi,
                                        split == 0);
  }
  // Fragments of k-steps 2c and 2c + 1 are the 8 consecutive dims 32c + 8 t4 .. + 7 of the
  // lane's row: one 16-byte load each (q rows are 16-byte aligned: DecodeAttentionSupported).
  uint32_t qf[T::kKSteps][2];
  const bf16* q = kPro ? qs + gid * kHeadDim + t4 * 8
                       : a.q + row * a.q_stride + (int64_t{kvh} * group + gid) * kHeadDim + t4 * 8;
#pragma unroll
  for (int c = 0; c < T::kKSteps / 2; ++c) {
    const uint4 v =
        gid < group ? *reinterpret_cast<const uint4*>(q + c * 32) : make_uint4(0, 0, 0, 0);
    qf[2 * c][0] = v.x;
    qf[2 * c][1] = v.y;
    qf[2 * c + 1][0] = v.z;
    qf[2 * c + 1][1] = v.w;
  }
  if constexpr (kPro) __syncthreads();  // every warp has read qs before the ring fills

  WarpState<kHeadDim> st;
#pragma unroll
  for (int j = 0; j < T::kNTiles; ++j) st.o[j][0] = st.o[j][1] = st.o[j][2] = st.o[j][3] = 0.0f;
  st.m = -INFINITY;
  st.l = 0.0f;
  unsigned char* ring = smem + warp * T::kWarpBytes;
  uint32_t* masks = reinterpret_cast<uint32_t*>(smem + L::kMaskOffset) + warp * kStages;
  const int64_t head_off = int64_t{kvh} * kHeadDim;
  const int32_t hi32 = static_cast<int32_t>(hi);
  auto tile_p0 = [&](int i) {
    return static_cast<int32_t>(lo + int64_t{warp + i * kWarps} * kTileKeys);
  };
  auto block_of = [&](int i) { return i < my_tiles ? TileBlock(table, tile_p0(i), hi32, bs, lane) : -1; };
  auto issue = [&](int i, int32_t block) {
    if (i < my_tiles) {
      IssueTile<kHeadDim>(a, block, head_off, tile_p0(i), ring + (i % kStages) * T::kStageBytes,
                          masks + i % kStages, lane);
    }
    __pipeline_commit();
  };
  auto first_block_of = [&](int i) {
    if (!spec_ok) return block_of(i);
    return i < my_tiles && tile_p0(i) + (lane & 15) < hi32 ? spec[i] : -1;
  };
  int32_t first_blocks[kStages - 1];
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) first_blocks[i] = first_block_of(i);
  int32_t next_block = first_block_of(kStages - 1);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i, first_blocks[i]);
  const float scale_log2 = a.scale * kLog2e;
  for (int i = 0; i < my_tiles; ++i) {
    __pipeline_wait_prior(kStages - 2);
    __syncwarp();
    issue(i + kStages - 1, next_block);
    next_block = block_of(i + kStages);
    const int slot = i % kStages;
    ComputeTile<kHeadDim>(qf, ring + slot * T::kStageBytes, masks[slot], scale_log2, st, lane);
  }
  __pipeline_wait_prior(0);
  MergeAndStore<kHeadDim, kWarps>(a, st, smem, group, row, s, kvh, split, splits, part_o, part_lse);
}

// out row of (sequence, head) = sum_i 2^(lse_i - L) O_i over the splits, L = log2-sum-exp.
// The splits' lse values are staged in shared memory; the CTA's threads form kCombineThreads /
// (D / 4) groups of D / 4 lanes (one float4 of dims each), group g sums splits g, g + groups,
// ... with independent 16-byte loads, and the groups' partial sums meet in shared memory.
// Shared memory: splits floats (rounded up to 4), then groups x (D + 1) floats.
constexpr int kCombineThreads = 128;

__global__ void __launch_bounds__(kCombineThreads)
    CombineSplitsKernel(AttentionArgs a, int32_t splits, int head_dim, const float* part_o,
                        const float* part_lse) {
  extern __shared__ float lse[];
  WaitForPrerequisites();
  AllowDependents();
  const int s = blockIdx.x;
  const int64_t h = blockIdx.y;
  int64_t row = 0, kv_len = 0;
  if (!DecodeRow(a, s, &row, &kv_len)) return;
  const int64_t base = (int64_t{s} * a.q_heads + h) * splits;
  for (int i = threadIdx.x; i < splits; i += blockDim.x) lse[i] = part_lse[base + i];
  __syncthreads();
  float m = -INFINITY;
  for (int i = 0; i < splits; ++i) m = fmaxf(m, lse[i]);
  const int lanes = head_dim / 4, groups = kCombineThreads / lanes;
  const int g = threadIdx.x / lanes, c = threadIdx.x % lanes;
  float* red = lse + (splits + 3) / 4 * 4;  // [groups][head_dim + 1]: dims, then the sum
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float sum = 0.0f;
  if (m != -INFINITY) {
#pragma unroll 4
    for (int i = g; i < splits; i += groups) {
      const float f = exp2f(lse[i] - m);
      const float4 v = *reinterpret_cast<const float4*>(part_o + (base + i) * head_dim + 4 * c);
      acc.x += f * v.x;
      acc.y += f * v.y;
      acc.z += f * v.z;
      acc.w += f * v.w;
      sum += f;
    }
  }
  float* mine = red + g * (head_dim + 1);
  mine[4 * c] = acc.x;
  mine[4 * c + 1] = acc.y;
  mine[4 * c + 2] = acc.z;
  mine[4 * c + 3] = acc.w;
  if (c == 0) mine[head_dim] = sum;
  __syncthreads();
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f, total = 0.0f;
    for (int j = 0; j < groups; ++j) {
      o += red[j * (head_dim + 1) + d];
      total += red[j * (head_dim + 1) + head_dim];
    }
    a.out[row * a.out_stride + h * head_dim + d] =
        __float2bfloat16(total > 0.0f ? o / total : 0.0f);
  }
}

// Raises the kernel's shared-memory limit on `device` (once per device) and returns how many
// of its CTAs fit on one multiprocessor.
template <int kHeadDim, int kWarps, bool kPro = false>
cudaError_t KernelSlots(int device, int* ctas_per_sm) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0: not yet set up on that device
  const int slot = device >= 0 && device < kMaxDevices ? device : 0;
  int n = cached[slot].load(std::memory_order_acquire);
  if (n == 0 || device >= kMaxDevices) {
    constexpr int kBytes = Smem<kHeadDim, kWarps>::kBytes;
    const auto kernel = DecodeAttentionKernel<kHeadDim, kWarps, kPro>;
    cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (err != cudaSuccess) return err;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, kBytes);
    if (err != cudaSuccess) return err;
    n = std::max(n, 1);
    cached[slot].store(n, std::memory_order_release);
  }
  *ctas_per_sm = n;
  return cudaSuccess;
}

// 8-warp CTAs exist for D = 128 only: at D = 64 two of them fit on an SM, like the 4-warp ones.
cudaError_t SlotsFor(int64_t head_dim, int warps, int device, int* ctas_per_sm) {
  if (head_dim == 64) return KernelSlots<64, 4>(device, ctas_per_sm);
  return warps == 8 ? KernelSlots<128, 8>(device, ctas_per_sm)
                    : KernelSlots<128, 4>(device, ctas_per_sm);
}

// The share of `slots` resident-CTA slots that `items` x `splits` CTAs fill, over whole waves.
double WaveFill(int64_t items, int64_t splits, int64_t slots) {
  const int64_t ctas = items * splits;
  const int64_t waves = (ctas + slots - 1) / slots;
  return static_cast<double>(ctas) / static_cast<double>(waves * slots);
}

// Splits per (sequence, kv head): the smallest count whose CTAs fill the resident slots in
// whole waves to >= 90% (or the best fill), each split keeping >= kMinChunk keys.
int32_t ChooseSplits(int64_t items, int64_t max_kv, int64_t slots) {
  const int64_t max_splits = std::max<int64_t>(1, (max_kv + kMinChunk - 1) / kMinChunk);
  int64_t best = 1;
  double best_fill = 0.0;
  for (int64_t splits = 1; splits <= std::min<int64_t>(max_splits, 4 * slots); ++splits) {
    const double fill = WaveFill(items, splits, slots);
    if (fill >= 0.9) return static_cast<int32_t>(splits);
    if (fill > best_fill + 1e-9) {
      best_fill = fill;
      best = splits;
    }
  }
  return static_cast<int32_t>(best);
}

std::atomic<int> forced_warps{0};  // SetDecodeAttentionWarps; 0: the plan's rule

}  // namespace

bool DecodeAttentionSupported(const AttentionArgs& a) {
  const int64_t d = a.dims.head_dim;
  const int64_t group = a.dims.num_kv_heads > 0 ? a.q_heads / a.dims.num_kv_heads : 0;
  return (d == 64 || d == 128) && group >= 1 && group <= kMaxDecodeGroup && Aligned16(a.cache) &&
         Aligned16(a.q) && a.q_stride % 8 == 0 && a.num_seqs <= 65535 &&
         int64_t{a.max_blocks_per_seq} * a.dims.block_size < (int64_t{1} << 31);
}

void SetDecodeAttentionWarps(int warps) {
  forced_warps.store(warps == 4 || warps == 8 ? warps : 0);
}

cudaError_t PlanDecodeAttention(const AttentionArgs& a, int32_t max_kv_len_hint, DecodePlan* plan) {
  int device = 0, per_sm4 = 1, per_sm8 = 1;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = SlotsFor(a.dims.head_dim, 4, device, &per_sm4);
  if (err == cudaSuccess && a.dims.head_dim == 128) err = SlotsFor(128, 8, device, &per_sm8);
  const int sms = SmCount();
  if (err != cudaSuccess) return err;
  int64_t max_kv = int64_t{a.max_blocks_per_seq} * a.dims.block_size;
  if (max_kv_len_hint > 0) max_kv = std::min<int64_t>(max_kv, max_kv_len_hint);
  if (a.sliding_window > 0) max_kv = std::min<int64_t>(max_kv, a.sliding_window);
  max_kv = std::max<int64_t>(max_kv, 1);
  const int64_t items = int64_t{a.num_seqs} * a.dims.num_kv_heads;
  // 4-warp CTAs, unless (D = 128) one wave of unsplit 8-warp CTAs, one per SM, fills >= 90%
  // of the SMs (the 4-warp plan would then be 2 splits and a combine for the same bytes in
  // flight per SM), or the 4-warp plan splits contexts of at most kShortContext keys: there the
  // per-warp chain of a few tiles is the time, and 8 warps halve it (decode_attention_bench
  // measurements: plugins/cuda/NOTES.md).
  const int64_t slots4 = int64_t{sms} * per_sm4, slots8 = int64_t{sms} * per_sm8;
  int32_t splits = ChooseSplits(items, max_kv, slots4);
  const int32_t splits8 = ChooseSplits(items, max_kv, slots8);
  const int forced = forced_warps.load();
  plan->warps = 4;
  const bool one_wave = splits8 == 1 && items <= slots8 && WaveFill(items, 1, slots8) >= 0.9;
  const bool short_splits = max_kv <= kShortContext;
  if (a.dims.head_dim == 128 && (forced == 8 || (forced == 0 && slots8 < slots4 && splits > 1 &&
                                                 (one_wave || short_splits)))) {
    plan->warps = 8;
    splits = splits8;
  }
  // The kernel's span rule, so that a sequence of max_kv keys gets exactly `chunk` per split.
  auto span = [&](int64_t n) {
    return ((max_kv + n - 1) / n + kTileKeys - 1) / kTileKeys * kTileKeys;
  };
  splits = static_cast<int32_t>(std::min<int64_t>(
      std::max<int64_t>((max_kv + span(splits) - 1) / span(splits), 1), kMaxSplits));
  const int64_t chunk = span(splits);
  plan->splits = splits;
  plan->chunk = static_cast<int32_t>(chunk);
  plan->workspace_bytes =
      splits > 1 ? static_cast<size_t>(a.num_seqs) * a.q_heads * splits * (a.dims.head_dim + 1) * 4
                 : 0;
  return cudaSuccess;
}

bool DecodeAttentionRunsPrologue(const AttentionArgs& a, const PrologueArgs& p) {
  return a.dims.head_dim == 128 && p.dims.head_dim == 128 && p.q == a.q &&
         p.q_stride == a.q_stride && p.rows == a.rows && p.hq == a.q_heads &&
         p.hk == a.dims.num_kv_heads && p.dims.num_kv_heads == a.dims.num_kv_heads &&
         p.cache == a.cache && p.layer == a.layer && p.dims.num_blocks == a.dims.num_blocks &&
         p.dims.num_layers == a.dims.num_layers && p.dims.block_size == a.dims.block_size &&
         AttentionPrologueFused(128, p.r);
}

cudaError_t LaunchDecodeAttention(const AttentionArgs& a, const DecodePlan& plan, void* workspace,
                                  cudaStream_t stream, const PrologueArgs* pro) {
  if (a.num_seqs == 0 || a.q_heads == 0) {
    return pro != nullptr ? LaunchAttentionPrologue(*pro, stream) : cudaSuccess;
  }
  float* part_o = static_cast<float*>(workspace);
  float* part_lse = part_o == nullptr ? nullptr
                                      : part_o + static_cast<size_t>(a.num_seqs) * a.q_heads *
                                                     plan.splits * a.dims.head_dim;
  const dim3 grid(static_cast<unsigned>(a.dims.num_kv_heads), static_cast<unsigned>(a.num_seqs),
                  static_cast<unsigned>(plan.splits));
  const int warps = plan.warps == 8 ? 8 : 4;
  int device = 0, per_sm = 0;  // SlotsFor raises the shared-memory limit on first use
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = SlotsFor(a.dims.head_dim, warps, device, &per_sm);
  if (err != cudaSuccess) return err;
  const bool fused = pro != nullptr && DecodeAttentionRunsPrologue(a, *pro);
  if (pro != nullptr && !fused) {  // the caller's prologue, on its own
    err = LaunchAttentionPrologue(*pro, stream);
    if (err != cudaSuccess) return err;
  }
  if (fused) {
    err = warps == 8 ? KernelSlots<128, 8, true>(device, &per_sm)
                     : KernelSlots<128, 4, true>(device, &per_sm);
    if (err != cudaSuccess) return err;
  }
  const PrologueArgs none;
  auto launch = [&](auto kernel, int smem_bytes) {
    return LaunchPdl(kernel, grid, dim3(warps * 32), smem_bytes, stream, a, plan.chunk, plan.splits,
                     part_o, part_lse, fused ? *pro : none);
  };
  if (a.dims.head_dim == 64) {
    err = launch(DecodeAttentionKernel<64, 4>, Smem<64, 4>::kBytes);
  } else if (fused) {
    err = warps == 8 ? launch(DecodeAttentionKernel<128, 8, true>, Smem<128, 8>::kBytes)
                     : launch(DecodeAttentionKernel<128, 4, true>, Smem<128, 4>::kBytes);
  } else {
    err = warps == 8 ? launch(DecodeAttentionKernel<128, 8>, Smem<128, 8>::kBytes)
                     : launch(DecodeAttentionKernel<128, 4>, Smem<128, 4>::kBytes);
  }
  if (err != cudaSuccess || plan.splits == 1) return err;
  const size_t groups = kCombineThreads / (a.dims.head_dim / 4);
  const size_t shared =
      ((static_cast<size_t>(plan.splits) + 3) / 4 * 4 + groups * (a.dims.head_dim + 1)) *
      sizeof(float);
  const float* cpart_o = part_o;
  const float* cpart_lse = part_lse;
  return LaunchPdl(CombineSplitsKernel,
                   dim3(static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(a.q_heads)),
                   dim3(kCombineThreads), shared, stream, a, plan.splits,
                   static_cast<int>(a.dims.head_dim), cpart_o, cpart_lse);
}

}  // namespace strata::cuda
