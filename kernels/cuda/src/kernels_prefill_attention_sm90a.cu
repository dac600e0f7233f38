// Paged causal prefill attention on Hopper's warpgroup MMA: the mma.sync kernel's structure
// (kernels_prefill_attention.cu) on wgmma, its K/V tiles brought by the tensor memory
// accelerator (TMA) from a producer warp.
//
// Built for sm_90a only (wgmma is not part of the portable sm_90 target); LaunchPrefillAttention
// takes it on compute capability 9.0 devices and the mma.sync kernel elsewhere.
//
// One CTA per (query tile, kv head), one CTA per SM: three math warpgroups and, in the
// warp-specialized kernel, a producer warpgroup. As in the mma.sync kernel the CTA's kRows (192) query rows pack
// the kv head's whole GQA group (row r is query head kvh * G + r / P at query row j0 + r % P,
// P = kRows / G positions per tile), K/V tiles of kKeys (64) positions stream from the paged
// cache through a kStages-deep (4) ring, from the diagonal tile down, and sequences of any
// lengths share one 1-D grid (see prefill_attention_common.cuh). Warpgroup w owns rows
// [64 w, 64 w + 64) and per tile issues
//   S[64 x 64] = Q K^T      head_dim / 16 wgmma.m64n64k16, Q and K read from shared memory
//                           through descriptors (K-major)
//   online softmax          fp32, exp2 domain, on the accumulators in registers (the m64nN
//                           accumulator layout is the m16n8 one per warp, so the mma.sync
//                           kernel's masking and softmax apply unchanged)
//   O[64 x D] += P V        4 wgmma.m64n{D}k16 with P from registers (bf16, the accumulator
//                           layout re-packed as the A operand) and V from shared memory
//                           (MN-major, the transposed-B form)
// so the tensor cores read Q, K and V straight from shared memory: no ldmatrix, and a warp
// issues 12 MMA instructions per tile where the mma.sync kernel issues 256.
//
// Loads (PrefillAttentionWsKernel, block_size >= 8): one producer warp reads each tile's block
// ids from the table (a lane per block) and issues its K and V boxes through a tensor map of the
// layer's pool (EncodeKvMap); they complete on the ring slot's `full` mbarrier, and each math
// warp arrives on the slot's `empty` mbarrier once its PV product is done, so the warpgroups run
// out of step and no math thread computes an address. The producer warpgroup gives its registers
// to the math warpgroups (setmaxnreg). Against every thread issuing cp.async copies behind a CTA
// barrier per tile (PrefillAttentionWgmmaKernel, what block sizes below 8 take); measured side
// by side in plugins/cuda/NOTES.md.
//
// Shared memory layout: every tile (Q, and K and V of each ring slot) is stored as panels of
// 64 columns (128 bytes per row), rows 128 bytes apart, 16-byte chunks XOR-swizzled by
// (row & 7) within each 1,024-byte group of 8 rows: wgmma's 128-byte swizzle, which is also
// TMA's, so the MMA reads are conflict-free. Descriptors: K-major operands (Q, K)
// have 8-row groups 1,024 bytes apart (stride byte offset) and step 32 bytes per k16; V, the
// MN-major operand, has its 8-key groups 1,024 bytes apart and its two 64-column panels
// kKeys x 128 bytes apart (leading byte offset), and steps 2,048 bytes per k16.
#include <algorithm>
#include <cmath>

#include "strata/kernels/cuda_kernels.h"
#include "prefill_attention_common.cuh"
#include "tma.cuh"
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
// 0: never the warp-specialized TMA kernel (a same-run baseline plugin for decode_step_bench).
#ifndef STRATA_PREFILL90_TMA
#define STRATA_PREFILL90_TMA 1
#endif
// 0 only to check that cuda_plugin_test's NaN-past-kv_len test fails without the zeroing.
#ifndef STRATA_PREFILL90_ZERO_TAIL
#define STRATA_PREFILL90_ZERO_TAIL 1
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
  // Two slots of block ids (one per key at most, block_size 1; the cp.async kernel stages them
  // a tile ahead), then two mbarriers per ring slot (the warp-specialized kernel's full: the
  // TMA bytes landed, and empty: the math warps are done with it), plus the slack that aligns
  // the buffers to a swizzle atom.
  static constexpr uint32_t kBarOffset = kIdsOffset + 2 * kKeys * 4;
  static constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8 + kAtomBytes;
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

// Zeroes the K and V rows of positions [from, kKeys) of the tile in ring slot `slot` (generic
// stores; the caller fences them for the async proxy before the barrier). The TMA brings the
// last block's rows past kv_len as the pool holds them (another sequence's, or never written);
// masking gives them probability 0, but 0 x NaN in P V would still be NaN.
template <int kHeadDim>
__device__ __forceinline__ void ZeroTail(unsigned char* slot, int from) {
  using T = Traits<kHeadDim>;
  for (int i = threadIdx.x; i < (kKeys - from) * T::kChunks; i += kThreads) {
    const int r = from + i / T::kChunks, chunk = i % T::kChunks;
    const uint32_t off = SwizzledOffset(T::kPanelBytes, r, chunk);
    *reinterpret_cast<uint4*>(slot + off) = make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(slot + T::kTileBytes + off) = make_uint4(0, 0, 0, 0);
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

// A warpgroup's state before its first tile: this lane's rows (warpgroup wg, warp (warp % 4)
// of it, rows lane / 4 and lane / 4 + 8, from r0) with their positions (-1: padding rows), an
// empty softmax, O = 0, and the descriptors of its Q rows and of ring slot 0.
template <int kHeadDim>
__device__ __forceinline__ void StartGroup(const AttentionArgs& a, const Tile& t, bool bad_blocks,
                                           int wg, int r0, int32_t per_tile, int32_t group,
                                           uint32_t qs, uint32_t ring, GroupState<kHeadDim>& g) {
  using T = Traits<kHeadDim>;
  g.mi.bad_blocks = bad_blocks;
  g.mi.window = a.sliding_window;
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
}

// One tile for a warpgroup, its K and V in ring slot byte offset `slot` (landed and visible to
// the tensor cores): S, wait, mask and softmax, O rescale, PV, wait.
template <int kHeadDim>
__device__ __forceinline__ void AttendTile(const AttentionArgs& a, const Tile& t,
                                           const int32_t* table, GroupState<kHeadDim>& g,
                                           int32_t key0, uint32_t slot, int lane) {
  uint32_t p[kKeys / 16][4];
  float s[kKeys / 2], corr[2];
  IssueScores(g, slot, s);
  WgmmaWaitAll();
  PinRegisters(s);
  ScoresToProbs(a, t, table, g, key0, s, corr, lane);
  RescaleO(g, corr);
  PackProbs(s, p);
  IssuePv(g, slot, p);
  WgmmaWaitAll();
  PinRegisters(g.o);
}

// The cp.async kernel: every thread issues its share of each tile's copies, and a CTA barrier
// per tile frees the ring slot. Block sizes below 8 (and the benchmarks' same-run baseline).
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
  const int r0 = wg * 64 + (warp % 4) * 16 + lane / 4;
  StartGroup(a, t, AnyBadBlock<kThreads>(a, t, table), wg, r0, per_tile, group, qs, ring, g);
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
  // Per tile: the ring slot is free once every warpgroup is past the next barrier.
  for (int i = 0; i < n_tiles; ++i) {
    const int next = advance(i);
    const bool stage_ids = next + 1 < n_tiles;
    const int32_t next_ids = stage_ids ? LoadIds<kKeys>(t, table, src.shift, last - next - 1) : -1;
    AttendTile(a, t, table, g, (last - i) * kKeys, (i % kStages) * T::kStageBytes, lane);
    if (stage_ids) StoreIds<kKeys>(ids + ((next + 1) % 2) * kKeys, next_ids, src.shift);
  }
  WaitGroup<0>();
  StoreRows<kHeadDim>(a, t, *reinterpret_cast<float(*)[kHeadDim / 8][4]>(g.o), g.l, r0, kvh, group,
                      per_tile, lane);
}

// The warp-specialized form of the TMA kernel: a fourth warpgroup produces (it gives its
// registers to the math warpgroups; one warp's lanes read the tile's block ids from the table
// and issue the tile's boxes, a lane per block), the three math warpgroups consume, and each
// ring slot has a full barrier (the TMA bytes) and an empty one (every math warp is done with
// the tile), so the warpgroups are not held in step by a CTA barrier per tile. Needs
// block_size >= 8.
constexpr int kWsThreads = kThreads + 128;
constexpr int kProducerRegs = 32;
constexpr int kConsumerRegs = (65536 / 128 - kProducerRegs) / kWarpGroups / 8 * 8;

template <int kHeadDim>
__global__ void __launch_bounds__(kWsThreads, 1)
    PrefillAttentionWsKernel(AttentionArgs a, int32_t per_tile, int32_t group,
                             const __grid_constant__ CUtensorMap kv_map) {
  using T = Traits<kHeadDim>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wg = warp / 4;
  const int64_t idx = int64_t{gridDim.x} - 1 - blockIdx.x;  // latest tiles first
  const int kvh = static_cast<int>(idx % a.dims.num_kv_heads);
  Tile t;
  if (!FindTile(a, idx / a.dims.num_kv_heads, per_tile, &t)) return;
  const int32_t* table = a.block_tables + int64_t{t.s} * a.max_blocks_per_seq;
  const int shift = __ffs(static_cast<int>(a.dims.block_size)) - 1;
  const uint32_t raw = SmemAddress(smem);
  const uint32_t base = (raw + kAtomBytes - 1) & ~(kAtomBytes - 1);
  const uint32_t qs = base, ring = base + T::kQBytes;
  const uint32_t full = base + T::kBarOffset, empty = full + 8 * kStages;  // + 8 slot
  const int32_t first = t.lo / kKeys, last = t.pos_max / kKeys;
  const int n_tiles = last - first + 1;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      tma::Init(full + 8 * i, 1);
      tma::Init(empty + 8 * i, kThreads / 32);
    }
    tma::FenceInit();
  }
  // Also the barrier that publishes the mbarriers' initialization.
  const bool bad_blocks = AnyBadBlock<kWsThreads>(a, t, table);
  if (wg == kWarpGroups) {
    tma::ReleaseRegisters<kProducerRegs>();
    if (warp != kThreads / 32) return;
    if (lane == 0) tma::Prefetch(&kv_map);
    const int32_t box = min(1 << shift, kKeys);
    const int32_t entries = kKeys / box;
    for (int i = 0; i < n_tiles; ++i) {
      const int slot = i % kStages;
      const int32_t key0 = (last - i) * kKeys;
      const int32_t id =
          lane < entries && key0 + lane * box < t.kv_len ? table[(key0 >> shift) + lane] : -1;
      if (i >= kStages) tma::Wait(empty + 8 * slot, (i / kStages - 1) & 1);
      if (lane == 0) tma::ArriveExpect(full + 8 * slot, T::kStageBytes);
      __syncwarp();
      if (lane < entries) {
        const uint32_t at = ring + slot * T::kStageBytes + static_cast<uint32_t>(lane * box) * 128u;
        const int32_t in_block = key0 & ((1 << shift) - 1);
#pragma unroll
        for (int p = 0; p < T::kPanels; ++p) {
          const int32_t col = kvh * kHeadDim + p * 64;
          tma::Load4d(at + p * T::kPanelBytes, &kv_map, col, in_block, 0, id, full + 8 * slot);
          tma::Load4d(at + T::kTileBytes + p * T::kPanelBytes, &kv_map, col, in_block, 1, id,
                      full + 8 * slot);
        }
      }
    }
    return;
  }
  tma::TakeRegisters<kConsumerRegs>();
  IssueQ<kHeadDim>(a, t, kvh, group, per_tile, qs);
  CommitGroup();
  GroupState<kHeadDim> g;
  const int r0 = wg * 64 + (warp % 4) * 16 + lane / 4;
  StartGroup(a, t, bad_blocks, wg, r0, per_tile, group, qs, ring, g);
  for (int i = 0; i < n_tiles; ++i) {
    const int slot = i % kStages;
    tma::Wait(full + 8 * slot, (i / kStages) & 1);
    if (i == 0) {  // Q landed, and the first tile's positions past kv_len zeroed
      WaitGroup<0>();
      const int32_t tail = t.kv_len - last * kKeys;
      if (STRATA_PREFILL90_ZERO_TAIL && tail < kKeys) {
        ZeroTail<kHeadDim>(smem + (ring - raw), tail);
      }
      FenceProxyAsync();
      tma::NamedBarrier(1, kThreads);
    }
    AttendTile(a, t, table, g, (last - i) * kKeys, slot * T::kStageBytes, lane);
    __syncwarp();
    if (lane == 0) tma::Arrive(empty + 8 * slot);
  }
  StoreRows<kHeadDim>(a, t, *reinterpret_cast<float(*)[kHeadDim / 8][4]>(g.o), g.l, r0, kvh, group,
                      per_tile, lane);
}

// The tensor map of the K/V planes of the call's layer: dims (innermost first) the row of a
// position (Hk x D elements), the position in its block, K or V, the block id; boxes of one
// 64-column panel of min(block_size, kKeys) positions, 128-byte swizzled as the ring stores
// them. False where TMA cannot serve the pool (block_size below 8, a driver without the entry
// point, a layout the encoder rejects): the cp.async kernel takes the call then.
bool EncodeKvMap(const AttentionArgs& a, CUtensorMap* map) {
  const CacheDims& d = a.dims;
  if (d.block_size < 8 || d.num_blocks < 1) return false;
  const uint64_t row = static_cast<uint64_t>(d.num_kv_heads * d.head_dim);
  const uint64_t plane = row * static_cast<uint64_t>(d.block_size);  // elements
  const cuuint64_t dims[4] = {row, static_cast<cuuint64_t>(d.block_size), 2,
                              static_cast<cuuint64_t>(d.num_blocks)};
  const cuuint64_t strides[3] = {row * sizeof(bf16), plane * sizeof(bf16),
                                 static_cast<cuuint64_t>(d.num_layers) * 2 * plane * sizeof(bf16)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(std::min<int64_t>(d.block_size, kKeys)), 1,
                             1};
  return tma::EncodeBf16Map4d(a.cache + a.layer * 2 * static_cast<int64_t>(plane), dims, strides,
                              box, map);
}

// The warp-specialized TMA kernel where the pool allows it, else the cp.async kernel.
template <int kHeadDim>
cudaError_t Launch(const AttentionArgs& a, bool tma, cudaStream_t stream) {
  constexpr int kSmem = Traits<kHeadDim>::kSmemBytes;
  CUtensorMap map{};
  if (STRATA_PREFILL90_TMA && tma && EncodeKvMap(a, &map)) {
    return LaunchPrefillKernel<PrefillAttentionWsKernel<kHeadDim>>(a, kRows, kWsThreads, kSmem,
                                                                   stream, map);
  }
  return LaunchPrefillKernel<PrefillAttentionWgmmaKernel<kHeadDim>>(a, kRows, kThreads, kSmem,
                                                                    stream);
}

cudaError_t LaunchWgmma(const AttentionArgs& a, bool tma, cudaStream_t stream) {
  if (a.num_seqs == 0 || a.rows == 0 || a.q_heads == 0) return cudaSuccess;
  return a.dims.head_dim == 64 ? Launch<64>(a, tma, stream) : Launch<128>(a, tma, stream);
}

}  // namespace

cudaError_t LaunchPrefillAttentionWgmma(const AttentionArgs& a, cudaStream_t stream) {
  return LaunchWgmma(a, true, stream);
}

cudaError_t LaunchPrefillAttentionWgmmaCp(const AttentionArgs& a, cudaStream_t stream) {
  return LaunchWgmma(a, false, stream);
}

}  // namespace strata::cuda
