// Paged causal prefill attention, v2: the v1 kernel's structure on Hopper's warpgroup MMA.
//
// Built for sm_90a only (wgmma is not part of the portable sm_90 target); LaunchPrefillAttention
// takes it on compute capability 9.0 devices and the v1 mma.sync kernel elsewhere.
//
// One CTA of kWarpGroups (3) warpgroups per (query tile, kv head), one CTA per SM. As in v1
// the CTA's kRows (192) query rows pack the kv head's whole GQA group (row r is query head
// kvh * G + r / P at query row j0 + r % P, P = kRows / G positions per tile), K/V tiles of
// kKeys (64) positions stream from the paged cache through a kStages-deep (4) cp.async ring,
// from the diagonal tile down, and sequences of any lengths share one 1-D grid (see
// prefill_attention_common.cuh). What changes is the math: warpgroup w owns rows
// [64 w, 64 w + 64) and per tile issues
//   S[64 x 64] = Q K^T      head_dim / 16 wgmma.m64n64k16, Q and K read from shared memory
//                           through descriptors (K-major)
//   online softmax          fp32, exp2 domain, on the accumulators in registers (the m64nN
//                           accumulator layout is the m16n8 one per warp, so v1's masking and
//                           softmax apply unchanged)
//   O[64 x D] += P V        4 wgmma.m64n{D}k16 with P from registers (bf16, the accumulator
//                           layout re-packed as the A operand) and V from shared memory
//                           (MN-major, the transposed-B form)
// so the tensor cores read Q, K and V straight from shared memory: no ldmatrix, and a warp
// issues 12 MMA instructions per tile where v1 issued 256. Three warpgroups rather than two:
// while one runs its softmax the others keep the tensor cores busy (2 -> 3 took 8k tokens from
// 358 to 430 TFLOP/s; plugins/cuda/NOTES.md also records the variants that did not help).
//
// Shared memory layout: every tile (Q, and K and V of each ring slot) is stored as panels of
// 64 columns (128 bytes per row), rows 128 bytes apart, 16-byte chunks XOR-swizzled by
// (row & 7) within each 1,024-byte group of 8 rows: wgmma's 128-byte swizzle, so the loads
// need no shuffling and the MMA reads are conflict-free. Descriptors: K-major operands (Q, K)
// have 8-row groups 1,024 bytes apart (stride byte offset) and step 32 bytes per k16; V, the
// MN-major operand, has its 8-key groups 1,024 bytes apart and its two 64-column panels
// kKeys x 128 bytes apart (leading byte offset), and steps 2,048 bytes per k16.
#include <cmath>

#include "cuda_kernels.h"
#include "prefill_attention_common.cuh"
#include "wgmma.cuh"

namespace strata::cuda {
namespace {

using namespace prefill;  // NOLINT(google-build-using-namespace): the shared parts
using namespace wgmma;    // NOLINT(google-build-using-namespace)

// The STRATA_PREFILL90_* macros exist only so bench builds can compare variants; the plugin is
// built with the defaults.
#ifndef STRATA_PREFILL90_WARPGROUPS
#define STRATA_PREFILL90_WARPGROUPS 3
#endif
#ifndef STRATA_PREFILL90_STAGES
#define STRATA_PREFILL90_STAGES 4
#endif
constexpr int kWarpGroups = STRATA_PREFILL90_WARPGROUPS;
constexpr int kThreads = 128 * kWarpGroups;
constexpr int kRows = 64 * kWarpGroups;  // query rows (head x position pairs) per CTA
constexpr int kKeys = 64;                // keys per K/V tile
constexpr int kStages = STRATA_PREFILL90_STAGES;
static_assert(kStages >= 2, "ring too shallow");
constexpr int kNTiles = kKeys / 8;     // n8 column groups of S
constexpr uint32_t kAtomBytes = 1024;  // 8 rows x 128 bytes: one swizzle atom

template <int kHeadDim>
struct Traits {
  static constexpr int kPanels = kHeadDim / 64;  // 64-column panels per row
  static constexpr int kChunks = kHeadDim / 8;   // 16-byte chunks per row
  static constexpr uint32_t kQPanelBytes = kRows * 128;
  static constexpr uint32_t kQBytes = kPanels * kQPanelBytes;
  static constexpr uint32_t kPanelBytes = kKeys * 128;  // one panel of a K or V tile
  static constexpr uint32_t kTileBytes = kPanels * kPanelBytes;
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;  // K then V
  static constexpr uint32_t kIdsOffset = kQBytes + kStages * kStageBytes;
  // Two slots of block ids (one per key at most, block_size 1), staged a tile ahead, plus the
  // slack that aligns the buffers to a swizzle atom.
  static constexpr int kSmemBytes = kIdsOffset + 2 * kKeys * 4 + kAtomBytes;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kQPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr int kKvPasses = (kKeys + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kQBytes % kAtomBytes == 0 && kStageBytes % kAtomBytes == 0, "atom alignment");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a panelled, 128-byte-swizzled buffer
// whose panels are `panel_bytes` apart.
__device__ __forceinline__ uint32_t SwizzledOffset(uint32_t panel_bytes, int row, int chunk) {
  return static_cast<uint32_t>(chunk >> 3) * panel_bytes + static_cast<uint32_t>(row) * 128u +
         ((static_cast<uint32_t>(chunk & 7) ^ static_cast<uint32_t>(row & 7)) << 4);
}

template <int kHeadDim>
__device__ __forceinline__ void WgmmaPv(float (&o)[kHeadDim / 2], const uint32_t (&a)[4],
                                        uint64_t b) {
  if constexpr (kHeadDim == 128) {
    WgmmaRS128(o, a, b);
  } else {
    WgmmaRS64(o, a, b);
  }
}

// Enqueues the CTA's Q rows (zero for padding rows) into the swizzled Q buffer.
template <int kHeadDim>
__device__ __forceinline__ void IssueQ(const AttentionArgs& a, const Tile& t, int kvh, int group,
                                       int32_t per_tile, uint32_t qs) {
  using T = Traits<kHeadDim>;
  const int chunk = threadIdx.x % T::kChunks;
#pragma unroll
  for (int pass = 0; pass < T::kQPasses; ++pass) {
    const int r = threadIdx.x / T::kChunks + pass * T::kRowsPerPass;
    if (r >= kRows) break;
    const int g = r / per_tile, j = t.j0 + r % per_tile;
    const bool valid = g < group && j < t.j_end;
    const bf16* src =
        a.q +
        (valid ? (t.row0 + j) * a.q_stride + (int64_t{kvh} * group + g) * kHeadDim + chunk * 8 : 0);
    CopyAsync16(qs + SwizzledOffset(T::kQPanelBytes, r, chunk), src, valid);
  }
}

// Enqueues K and V of positions [tile * kKeys, + kKeys) into one ring slot (K at `slot`, V
// kTileBytes after it). `ids` holds the block ids of the tile's blocks from its first one on;
// positions at or past kv_len, and positions whose block id is outside the pool, are
// zero-filled (their id is never read).
template <int kHeadDim>
__device__ __forceinline__ void IssueKv(const AttentionArgs& a, const Tile& t, const KvSource& src,
                                        const int32_t* ids, int32_t tile, uint32_t slot) {
  using T = Traits<kHeadDim>;
  const int chunk = threadIdx.x % T::kChunks;
  const int32_t key0 = tile * kKeys, first_block = key0 >> src.shift;
#pragma unroll
  for (int pass = 0; pass < T::kKvPasses; ++pass) {
    const int r = threadIdx.x / T::kChunks + pass * T::kRowsPerPass;
    if (r >= kKeys) break;
    const int32_t p = key0 + r;
    const int32_t block = p < t.kv_len ? ids[(p >> src.shift) - first_block] : -1;
    const bool valid = block >= 0 && block < a.dims.num_blocks;
    const int32_t in_block = p & ((1 << src.shift) - 1);
    const bf16* from = src.base + (valid ? block * src.block_stride + in_block * src.token : 0);
    const uint32_t at = slot + SwizzledOffset(T::kPanelBytes, r, chunk);
    CopyAsync16(at, from, valid);
    CopyAsync16(at + T::kTileBytes, from + src.plane, valid);
  }
}

// One warpgroup's view of a CTA's work: its 64 query rows' running softmax state and O, the
// descriptors of its Q rows and of ring slot 0's K and V, and what masking needs.
template <int kHeadDim>
struct GroupState {
  float o[kHeadDim / 2];  // m64n{D} accumulators: [D / 8][4] in the m16n8 layout
  float m[2], l[2];       // running max (log2 domain) and this lane's share of the row sums
  MaskInfo<1> mi;
  uint64_t q_desc, k_desc, v_desc;
  float scale_log2;
  int32_t full_lo;  // first key every row of the CTA sees (window), 0 without a window
};

// S = Q K^T of the tile in ring slot byte offset `slot` (issued, not waited for).
template <int kHeadDim>
__device__ __forceinline__ void IssueScores(const GroupState<kHeadDim>& g, uint32_t slot,
                                            float (&s)[kKeys / 2]) {
  using T = Traits<kHeadDim>;
  WgmmaFence();
#pragma unroll
  for (int k = 0; k < kHeadDim / 16; ++k) {
    const uint32_t koff = (k % 4) * 32u;  // k16 step within a 64-column panel
    WgmmaSS64(s, g.q_desc + (((k / 4) * T::kQPanelBytes + koff) >> 4),
              g.k_desc + ((slot + (k / 4) * T::kPanelBytes + koff) >> 4), k > 0);
  }
  WgmmaCommit();
}

// Masks (when the tile needs it) and folds the tile's scores into the running softmax, in
// place (s becomes the tile's probabilities); corr: the factors O's rows are rescaled by.
template <int kHeadDim>
__device__ __forceinline__ void ScoresToProbs(const AttentionArgs& a, const Tile& t,
                                              const int32_t* table, GroupState<kHeadDim>& g,
                                              int32_t key0, float (&s)[kKeys / 2], float (&corr)[2],
                                              int lane) {
  auto& sc = *reinterpret_cast<float(*)[1][kNTiles][4]>(s);
  const bool mask = key0 + kKeys - 1 > t.pos_min || key0 < g.full_lo || g.mi.bad_blocks;
  if (mask) {
    const uint64_t valid =
        g.mi.bad_blocks ? TileValidBits<kKeys>(a, t, table, key0, lane) : ~uint64_t{0};
    ApplyMask(sc, g.mi, key0, valid, lane);
  }
  Softmax<kNTiles>(sc[0], g.scale_log2, g.m, g.l, corr);
}

template <int kHeadDim>
__device__ __forceinline__ void RescaleO(GroupState<kHeadDim>& g, const float (&corr)[2]) {
  auto& o = *reinterpret_cast<float(*)[kHeadDim / 8][4]>(g.o);
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) {
    o[d][0] *= corr[0];
    o[d][1] *= corr[0];
    o[d][2] *= corr[1];
    o[d][3] *= corr[1];
  }
}

// The probabilities as bf16 A-operand registers of the PV product (the accumulator layout of
// an n16 column pair is the A layout of a k16 step).
__device__ __forceinline__ void PackProbs(const float (&s)[kKeys / 2],
                                          uint32_t (&p)[kKeys / 16][4]) {
  const auto& sc = *reinterpret_cast<const float(*)[kNTiles][4]>(s);
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) {
    p[k][0] = PackBf16(sc[2 * k][0], sc[2 * k][1]);
    p[k][1] = PackBf16(sc[2 * k][2], sc[2 * k][3]);
    p[k][2] = PackBf16(sc[2 * k + 1][0], sc[2 * k + 1][1]);
    p[k][3] = PackBf16(sc[2 * k + 1][2], sc[2 * k + 1][3]);
  }
}

// O += P V of the tile in ring slot byte offset `slot` (issued, not waited for).
template <int kHeadDim>
__device__ __forceinline__ void IssuePv(GroupState<kHeadDim>& g, uint32_t slot,
                                        const uint32_t (&p)[kKeys / 16][4]) {
  WgmmaFence();
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) {
    WgmmaPv<kHeadDim>(g.o, p[k], g.v_desc + ((slot + k * 2 * kAtomBytes) >> 4));
  }
  WgmmaCommit();
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1)
    PrefillAttentionWgmmaKernel(AttentionArgs a, int32_t per_tile, int32_t group) {
  using T = Traits<kHeadDim>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wg = warp / 4;
  const int64_t idx = int64_t{gridDim.x} - 1 - blockIdx.x;  // latest tiles first
  const int kvh = static_cast<int>(idx % a.dims.num_kv_heads);
  Tile t;
  if (!FindTile(a, idx / a.dims.num_kv_heads, per_tile, &t)) return;
  const int32_t* table = a.block_tables + int64_t{t.s} * a.max_blocks_per_seq;
  const KvSource src = MakeKvSource<kHeadDim>(a, kvh);
  // Buffers start on a swizzle atom: the hardware swizzles absolute shared addresses.
  const uint32_t raw = SmemAddress(smem);
  const uint32_t base = (raw + kAtomBytes - 1) & ~(kAtomBytes - 1);
  const uint32_t qs = base, ring = base + T::kQBytes;
  int32_t* ids = reinterpret_cast<int32_t*>(smem + (base - raw) + T::kIdsOffset);  // [2][kKeys]
  const int32_t first = t.lo / kKeys, last = t.pos_max / kKeys;
  const int n_tiles = last - first + 1;
  // Tiles are walked from the diagonal down: the i-th is tile last - i, in ring slot i % kStages.
  // kAhead tiles are in flight beyond the one the loop waits for; the first kAhead + 1 (Q with
  // the first) are issued here, reading the table directly; the ids of the next one are staged.
  // A slot is refilled once every warpgroup is past the barrier after its tile.
  constexpr int kAhead = kStages - 2;
  IssueQ<kHeadDim>(a, t, kvh, group, per_tile, qs);
#pragma unroll
  for (int i = 0; i <= kAhead; ++i) {
    if (i < n_tiles) {
      const int32_t tile = last - i;
      IssueKv<kHeadDim>(a, t, src, table + ((tile * kKeys) >> src.shift), tile,
                        ring + i * T::kStageBytes);
    }
    CommitGroup();
  }
  if (kAhead + 1 < n_tiles) {
    StoreIds<kKeys>(ids + ((kAhead + 1) % 2) * kKeys,
                    LoadIds<kKeys>(t, table, src.shift, last - (kAhead + 1)), src.shift);
  }
  GroupState<kHeadDim> g;
  g.mi.bad_blocks = AnyBadBlock<kThreads>(a, t, table);
  g.mi.window = a.sliding_window;
  // This lane's rows: warpgroup wg, warp (warp % 4) of it, rows lane / 4 and lane / 4 + 8.
  const int r0 = wg * 64 + (warp % 4) * 16 + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    const bool valid = r / per_tile < group && t.j0 + r % per_tile < t.j_end;
    g.mi.pos[0][h] = valid ? t.pos_min + r % per_tile : -1;
    g.m[h] = -INFINITY;
    g.l[h] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) g.o[i] = 0.0f;
  g.scale_log2 = a.scale * kLog2e;
  g.full_lo = a.sliding_window > 0 ? t.pos_max - a.sliding_window + 1 : 0;
  g.q_desc = Descriptor(qs + wg * 64 * 128, 16, kAtomBytes);
  g.k_desc = Descriptor(ring, 16, kAtomBytes);
  g.v_desc = Descriptor(ring + T::kTileBytes, T::kPanelBytes, kAtomBytes);
  // Waits for tile w (and everything before it) to land and be visible to every thread and
  // the tensor cores, then issues tile w + kAhead + 1 into the slot freed before it; returns
  // that tile's index (the caller stages the ids of the one after).
  auto advance = [&](int w) {
    WaitGroup<kAhead>();
    FenceProxyAsync();
    __syncthreads();
    const int next = w + kAhead + 1;
    if (next < n_tiles) {
      IssueKv<kHeadDim>(a, t, src, ids + (next % 2) * kKeys, last - next,
                        ring + (next % kStages) * T::kStageBytes);
    }
    CommitGroup();
    return next;
  };
  uint32_t p[kKeys / 16][4];
  float s[kKeys / 2], corr[2];
  // Per tile: S, wait, softmax, PV, wait; the ring slot is free once every warpgroup is past
  // the next barrier.
  for (int i = 0; i < n_tiles; ++i) {
    const int next = advance(i);
    const bool stage_ids = next + 1 < n_tiles;
    const int32_t next_ids = stage_ids ? LoadIds<kKeys>(t, table, src.shift, last - next - 1) : -1;
    const uint32_t slot = (i % kStages) * T::kStageBytes;
    IssueScores(g, slot, s);
    WgmmaWaitAll();
    PinRegisters(s);
    ScoresToProbs(a, t, table, g, (last - i) * kKeys, s, corr, lane);
    RescaleO(g, corr);
    PackProbs(s, p);
    IssuePv(g, slot, p);
    WgmmaWaitAll();
    PinRegisters(g.o);
    if (stage_ids) StoreIds<kKeys>(ids + ((next + 1) % 2) * kKeys, next_ids, src.shift);
  }
  WaitGroup<0>();
  StoreRows<kHeadDim>(a, t, *reinterpret_cast<float(*)[kHeadDim / 8][4]>(g.o), g.l, r0, kvh, group,
                      per_tile, lane);
}

template <int kHeadDim>
cudaError_t Launch(const AttentionArgs& a, cudaStream_t stream) {
  return LaunchPrefillKernel<PrefillAttentionWgmmaKernel<kHeadDim>>(
      a, kRows, kThreads, Traits<kHeadDim>::kSmemBytes, stream);
}

}  // namespace

cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_seqs == 0 || a.rows == 0 || a.q_heads == 0) return cudaSuccess;
  return a.dims.head_dim == 64 ? Launch<64>(a, stream) : Launch<128>(a, stream);
}

}  // namespace strata::cuda
