// What the two paged prefill attention kernels share: the kernel on mma.sync
// (kernels_prefill_attention.cu, any sm_90 device) and the Hopper kernel on wgmma
// (kernels_prefill_attention_sm90a.cu). Both pack a kv head's whole GQA group into a CTA's
// query rows, stream K/V tiles of kKeys positions from the paged cache with cp.async, walk
// the tiles from the diagonal down, and deal one 1-D grid over a variable-length batch.
//
// Device code only; included by .cu files, each in its own anonymous namespace use.
#pragma once

#include <cmath>
#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"

namespace strata::cuda::prefill {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The work of one CTA: sequence s, its query rows [j0, j_end), their absolute positions
// [pos_min, pos_max] and the keys [lo, pos_max] they attend to.
struct Tile {
  int s = 0;
  int64_t row0 = 0;  // q/out row of the sequence's query row 0
  int32_t q_len = 0, kv_len = 0, j0 = 0, j_end = 0, pos_min = 0, pos_max = 0, lo = 0;
};

// Sequence s owns the tile slots [Base(s), Base(s + 1)), Base(s) = floor(q_start[s] / P) + s,
// which always holds ceil(q_len / P) slots. Maps tile slot `slot` to its sequence and query
// rows; false if the slot holds no tile or the sequence is malformed (q_start out of
// [0, rows], kv_len < q_len, kv_len past the table).
__device__ inline bool FindTile(const AttentionArgs& a, int64_t slot, int32_t per_tile, Tile* t) {
  auto base = [&](int s) {
    const int64_t q = min(max(int64_t{a.q_start[s]}, int64_t{0}), a.rows);
    return q / per_tile + s;
  };
  int lo = 0, hi = a.num_seqs - 1, found = -1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (base(mid) <= slot) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (found < 0) return false;
  const int64_t begin = a.q_start[found], end = a.q_start[found + 1];
  const int64_t kv_len = a.kv_len[found], q_len = end - begin;
  const int64_t j0 = (slot - base(found)) * per_tile;
  if (begin < 0 || end > a.rows || q_len <= 0 || j0 >= q_len || kv_len < q_len ||
      kv_len > int64_t{a.max_blocks_per_seq} * a.dims.block_size) {
    return false;
  }
  t->s = found;
  t->row0 = begin;
  t->q_len = static_cast<int32_t>(q_len);
  t->kv_len = static_cast<int32_t>(kv_len);
  t->j0 = static_cast<int32_t>(j0);
  t->j_end = static_cast<int32_t>(min(j0 + per_tile, q_len));
  t->pos_min = t->kv_len - t->q_len + t->j0;
  t->pos_max = t->kv_len - t->q_len + t->j_end - 1;
  t->lo = a.sliding_window > 0 ? max(0, t->pos_min - a.sliding_window + 1) : 0;
  return true;
}

// The 1-D grid of a kernel with `rows` query rows per CTA: the GQA group, the positions per tile
// (P = rows / G) and the CTA count (tile slots x kv heads). False if the group exceeds `rows` or
// the grid is too large.
inline bool PrefillGrid(const AttentionArgs& a, int rows, int32_t* group, int32_t* per_tile,
                        unsigned* ctas) {
  *group = static_cast<int32_t>(a.q_heads / a.dims.num_kv_heads);
  if (*group < 1 || *group > rows) return false;
  *per_tile = rows / *group;
  const int64_t n = (a.rows / *per_tile + a.num_seqs) * a.dims.num_kv_heads;
  if (n > 0x7fffffff) return false;
  *ctas = static_cast<unsigned>(n);
  return true;
}

// Launches kKernel (arguments: the batch, P, G, then `extra`) with `rows` query rows per CTA
// over the batch.
template <auto kKernel, typename... Extra>
cudaError_t LaunchPrefillKernel(const AttentionArgs& a, int rows, int threads, int smem_bytes,
                                cudaStream_t stream, const Extra&... extra) {
  cudaError_t err = AllowDynamicSmem<kKernel>(smem_bytes);
  if (err != cudaSuccess) return err;
  int32_t group = 0, per_tile = 0;
  unsigned ctas = 0;
  if (!PrefillGrid(a, rows, &group, &per_tile, &ctas)) return cudaErrorInvalidConfiguration;
  kKernel<<<ctas, threads, smem_bytes, stream>>>(a, per_tile, group, extra...);
  return cudaGetLastError();
}

// Per-thread constants of the K/V loads: this thread's 16-byte column in the cache for the
// CTA's kv head and layer, and the element stride of one pool block.
struct KvSource {
  const bf16* base;      // cache + layer plane + head + chunk
  int64_t block_stride;  // elements per pool block (all layers, K and V)
  int32_t token;         // elements per position (Hk x D)
  int32_t plane;         // elements of K (or V) of one block of one layer
  int shift;             // log2(block_size)
};

template <int kHeadDim>
__device__ inline KvSource MakeKvSource(const AttentionArgs& a, int kvh) {
  KvSource src;
  src.token = static_cast<int32_t>(a.dims.num_kv_heads * kHeadDim);
  src.plane = static_cast<int32_t>(a.dims.block_size) * src.token;
  src.block_stride = a.dims.num_layers * 2 * int64_t{src.plane};
  src.base = a.cache + a.layer * 2 * int64_t{src.plane} + int64_t{kvh} * kHeadDim +
             (threadIdx.x % (kHeadDim / 8)) * 8;
  src.shift = __ffs(static_cast<int>(a.dims.block_size)) - 1;
  return src;
}

// Block ids of tile `tile`'s blocks (at most kKeys, fewer with larger blocks): entry e is the
// id of the tile's e-th block, -1 past kv_len. Loaded a tile ahead into a register (LoadIds)
// and stored to shared memory after the compute (StoreIds), so the table's latency is hidden.
template <int kKeys>
__device__ __forceinline__ int32_t LoadIds(const Tile& t, const int32_t* table, int shift,
                                           int32_t tile) {
  const int entries = kKeys >> shift > 0 ? kKeys >> shift : 1;
  const int32_t bi = ((tile * kKeys) >> shift) + static_cast<int32_t>(threadIdx.x);
  return static_cast<int>(threadIdx.x) < entries && (bi << shift) < t.kv_len ? table[bi] : -1;
}
template <int kKeys>
__device__ __forceinline__ void StoreIds(int32_t* slot, int32_t id, int shift) {
  const int entries = kKeys >> shift > 0 ? kKeys >> shift : 1;
  if (static_cast<int>(threadIdx.x) < entries) slot[threadIdx.x] = id;
}

// True if some table entry the CTA reads (positions [lo, pos_max]) is outside the pool; those
// keys are then masked one by one (the general kernel skips them too). Called by every thread.
template <int kThreads>
__device__ inline bool AnyBadBlock(const AttentionArgs& a, const Tile& t, const int32_t* table) {
  const int32_t bs = static_cast<int32_t>(a.dims.block_size);
  bool bad = false;
  for (int32_t b = t.lo / bs + threadIdx.x; b <= t.pos_max / bs; b += kThreads) {
    bad |= table[b] < 0 || table[b] >= a.dims.num_blocks;
  }
  return __syncthreads_or(bad) != 0;
}

// Bit k set: position key0 + k is below kv_len and its block id is inside the pool. Called by
// the whole warp, only on CTAs whose range holds a bad table entry.
template <int kKeys>
__device__ inline uint64_t TileValidBits(const AttentionArgs& a, const Tile& t,
                                         const int32_t* table, int32_t key0, int lane) {
  uint64_t bits = 0;
#pragma unroll
  for (int half = 0; half < kKeys / 32; ++half) {
    const int32_t p = key0 + half * 32 + lane;
    bool ok = false;
    if (p < t.kv_len) {
      const int32_t b = table[p / static_cast<int32_t>(a.dims.block_size)];
      ok = b >= 0 && b < a.dims.num_blocks;
    }
    bits |= uint64_t{__ballot_sync(0xffffffffu, ok)} << (32 * half);
  }
  return bits;
}

// What masking needs per lane: the positions of its rows (-1 for padding rows, which then
// see no key), the window, and whether the CTA's range holds a table entry outside the pool.
template <int kMTiles>
struct MaskInfo {
  int32_t pos[kMTiles][2];
  int32_t window;
  bool bad_blocks;
};

// Sets the scores of invisible keys to -inf: keys after the row's position, before its window,
// or whose bit in `valid` is clear. The scores are in the m16n8 accumulator layout (per n-tile
// of 8 keys: rows gid and gid + 8, columns 2 (lane % 4) + {0, 1}). Offsets are compared as
// compile-time constants against per-row bounds shifted by this lane's first column, so each
// element costs a few instructions.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void ApplyMask(float (&sc)[kMTiles][kNTiles][4],
                                          const MaskInfo<kMTiles>& mi, int32_t key0, uint64_t valid,
                                          int lane) {
  const int32_t c0 = 2 * (lane % 4);
  const uint64_t vbits = valid >> c0;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t hi = mi.pos[mt][h] - key0 - c0;  // last visible offset - c0
      const int32_t lo = mi.window > 0 ? hi - mi.window + 1 : -8 * kNTiles;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int off = n * 8 + b;
          if (off > hi || off < lo || ((vbits >> off) & 1u) == 0) sc[mt][n][2 * h + b] = -INFINITY;
        }
      }
    }
  }
}

// Online softmax over one tile's raw scores (masked ones -inf) of one m16 tile, with the scale
// (> 0, so the max commutes with it) folded into the exponent's FMA; returns the correction
// factors of its two rows. The row sums l stay per lane (reduced over the quad at the end).
template <int kNTiles>
__device__ __forceinline__ void Softmax(float (&sc)[kNTiles][4], float scale_log2, float (&m)[2],
                                        float (&l)[2], float (&corr)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) mx = fmaxf(mx, fmaxf(sc[n][2 * h], sc[n][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[h], mx * scale_log2);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    corr[h] = Exp2(m[h] - m_use);
    m[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      sc[n][2 * h] = Exp2(fmaf(sc[n][2 * h], scale_log2, -m_use));
      sc[n][2 * h + 1] = Exp2(fmaf(sc[n][2 * h + 1], scale_log2, -m_use));
      sum += sc[n][2 * h] + sc[n][2 * h + 1];
    }
    l[h] = l[h] * corr[h] + sum;
  }
}

// Normalizes and writes one m16 tile's two rows of this lane (CTA rows r0 and r0 + 8) as bf16,
// skipping padding rows. `o` is in the m16n8 accumulator layout over kHeadDim / 8 n-tiles.
template <int kHeadDim>
__device__ __forceinline__ void StoreRows(const AttentionArgs& a, const Tile& t,
                                          const float (&o)[kHeadDim / 8][4], const float (&l)[2],
                                          int r0, int kvh, int group, int32_t per_tile, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int r = r0 + 8 * h;
    const int g = r / per_tile, j = t.j0 + r % per_tile;
    if (g >= group || j >= t.j_end) continue;
    bf16* dst = a.out + (t.row0 + j) * a.out_stride + (int64_t{kvh} * group + g) * kHeadDim +
                2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      *reinterpret_cast<__nv_bfloat162*>(dst + d * 8) =
          __floats2bfloat162_rn(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
    }
  }
}

}  // namespace strata::cuda::prefill
