// Paged causal prefill attention on mma.sync: FlashAttention-2 style on the tensor cores.
//
// One CTA of kWarps (4) warps per (query tile, kv head), two CTAs per SM. The CTA's kRows (128)
// query rows pack the whole GQA group of its kv head: row r is query head kvh * G + r / P at
// the sequence's query row j0 + r % P, with P = kRows / G positions per tile (rows past P * G
// are padding). So each K/V tile loaded into shared memory serves every query head that reads
// it, and the causal diagonal of a tile spans only P positions.
//
// K/V tiles of kKeys (64) positions are streamed from the paged cache through a kStages-deep
// (2) cp.async ring (16-byte copies; positions past kv_len or whose block id is outside the
// pool are zero-filled, the latter also masked), from the diagonal tile down to the first one,
// so the masked tiles come first and the running max settles early. The block ids of the tile
// after next are loaded into a register during the current tile and staged in shared memory
// after it, so the table lookup never stalls the copies. Each warp owns 32 rows (two m16
// tiles, so every K/V fragment read from shared memory feeds two mma):
//   S[32 x 64] = Q[32 x D] K^T          (mma.m16n8k16 bf16 -> fp32, Q and K via ldmatrix)
//   online softmax in fp32, exp2 domain, the scale folded into the exponent's FMA, the row
//   sums kept per lane and reduced at the end
//   O[32 x D] += P (bf16) V             (same mma; V through ldmatrix.trans)
// Shared memory rows are 16-byte chunks XOR-swizzled by (row & 7), so every ldmatrix phase
// touches eight distinct bank groups. Masking (causal, sliding window, bad blocks) runs only
// on the tiles that need it, as compile-time offsets against per-row bounds.
//
// Sequences of different lengths share one 1-D grid without a host round trip: sequence s
// owns the tile slots [Base(s), Base(s + 1)), Base(s) = floor(q_start[s] / P) + s, which always
// holds ceil(q_len / P) slots; a CTA finds its sequence by binary search and exits if its slot
// is past the sequence's last tile. Slots are dealt in reverse so the longest (latest) tiles of
// a sequence start first.
#include <algorithm>
#include <cmath>

#include "strata/kernels/cuda_kernels.h"
#include "prefill_attention_common.cuh"

namespace strata::cuda {
namespace {

using namespace prefill;  // NOLINT(google-build-using-namespace): the shared parts

// Tile shape. The STRATA_PREFILL_* macros exist only so bench builds can compare variants;
// the plugin is built with the defaults.
#ifndef STRATA_PREFILL_WARPS
#define STRATA_PREFILL_WARPS 4
#endif
#ifndef STRATA_PREFILL_MTILES
#define STRATA_PREFILL_MTILES 2
#endif
#ifndef STRATA_PREFILL_KEYS
#define STRATA_PREFILL_KEYS 64
#endif
#ifndef STRATA_PREFILL_STAGES
#define STRATA_PREFILL_STAGES 2
#endif
#ifndef STRATA_PREFILL_CTAS_PER_SM
#define STRATA_PREFILL_CTAS_PER_SM 2
#endif
constexpr int kWarps = STRATA_PREFILL_WARPS;
constexpr int kThreads = kWarps * 32;
constexpr int kMTiles = STRATA_PREFILL_MTILES;  // 16-row mma tiles per warp
constexpr int kWarpRows = 16 * kMTiles;     // rows per warp: each K/V fragment feeds kMTiles mma
constexpr int kRows = kWarps * kWarpRows;   // query rows (head x position pairs) per CTA
constexpr int kKeys = STRATA_PREFILL_KEYS;  // keys per K/V tile
constexpr int kStages = STRATA_PREFILL_STAGES;
constexpr int kCtasPerSm = STRATA_PREFILL_CTAS_PER_SM;
static_assert(kKeys == 32 || kKeys == 64, "a tile's valid-key bits fit one 64-bit word");
constexpr int kNTiles = kKeys / 8;  // S n-tiles per warp

template <int kHeadDim>
struct Traits {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kTileBytes = kKeys * kRowBytes;  // K (or V) of one tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kIdsOffset = kQBytes + kStages * kStageBytes;
  // Two slots of block ids (one per key at most, block_size 1), staged a tile ahead.
  static constexpr int kSmemBytes = kIdsOffset + 2 * kKeys * 4;
  static constexpr int kKSteps = kHeadDim / 16;  // Q.K mma k-steps over d
  static constexpr int kDTiles = kHeadDim / 8;   // P.V mma n-tiles over d
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kKeys % kRowsPerPass == 0 && kRows % kRowsPerPass == 0, "load passes");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile.
template <int kHeadDim>
__device__ __forceinline__ uint32_t SwizzledOffset(int row, int chunk) {
  return static_cast<uint32_t>(row * Traits<kHeadDim>::kRowBytes + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += A[16x16] B[16x8], bf16 operands, fp32 accumulators.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Enqueues the CTA's Q rows (zero for padding rows) into the swizzled Q buffer.
template <int kHeadDim>
__device__ void IssueQ(const AttentionArgs& a, const Tile& t, int kvh, int group, int32_t per_tile,
                       unsigned char* qs) {
  using T = Traits<kHeadDim>;
  const int chunk = threadIdx.x % T::kChunks;
#pragma unroll
  for (int pass = 0; pass < kRows / T::kRowsPerPass; ++pass) {
    const int r = threadIdx.x / T::kChunks + pass * T::kRowsPerPass;
    const int g = r / per_tile, j = t.j0 + r % per_tile;
    const bool valid = g < group && j < t.j_end;
    const bf16* src =
        a.q +
        (valid ? (t.row0 + j) * a.q_stride + (int64_t{kvh} * group + g) * kHeadDim + chunk * 8 : 0);
    CopyAsync16(SmemAddress(qs) + SwizzledOffset<kHeadDim>(r, chunk), src, valid);
  }
}

// Enqueues K and V of positions [tile * kKeys, + kKeys) into one ring slot. `ids` holds the
// block ids of the tile's blocks from its first one on (global table or the staged copy in
// shared memory); positions at or past kv_len, and positions whose block id is outside the
// pool, are zero-filled (their id is never read).
template <int kHeadDim>
__device__ __forceinline__ void IssueKv(const AttentionArgs& a, const Tile& t, const KvSource& src,
                                        const int32_t* ids, int32_t tile, unsigned char* slot) {
  using T = Traits<kHeadDim>;
  const int chunk = threadIdx.x % T::kChunks;
  const uint32_t dst = SmemAddress(slot);
  const int32_t key0 = tile * kKeys, first_block = key0 >> src.shift;
#pragma unroll
  for (int pass = 0; pass < kKeys / T::kRowsPerPass; ++pass) {
    const int r = threadIdx.x / T::kChunks + pass * T::kRowsPerPass;
    const int32_t p = key0 + r;
    const int32_t block = p < t.kv_len ? ids[(p >> src.shift) - first_block] : -1;
    const bool valid = block >= 0 && block < a.dims.num_blocks;
    const int32_t in_block = p & ((1 << src.shift) - 1);
    const bf16* from = src.base + (valid ? block * src.block_stride + in_block * src.token : 0);
    const uint32_t at = dst + SwizzledOffset<kHeadDim>(r, chunk);
    CopyAsync16(at, from, valid);
    CopyAsync16(at + T::kTileBytes, from + src.plane, valid);
  }
}

// One warp's running state for its kWarpRows rows: per m-tile, O accumulators (rows gid and
// gid + 8 of each n-tile), running max m (log2 domain) and this lane's share of the row sums l.
template <int kHeadDim>
struct WarpState {
  float o[kMTiles][Traits<kHeadDim>::kDTiles][4];
  float m[kMTiles][2];
  float l[kMTiles][2];
};

// S = Q K^T for the warp's kWarpRows rows against the tile's 64 keys. Q fragments are read
// from shared memory per k-step (holding them would not fit next to O and S in registers).
template <int kHeadDim>
__device__ __forceinline__ void QKt(uint32_t qs, uint32_t ks, float (&sc)[kMTiles][kNTiles][4],
                                    int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
    }
  }
  const int warp = threadIdx.x / 32;
  const int key_in = (lane >> 4) * 8 + (lane & 7), chunk_in = (lane >> 3) & 1;
#pragma unroll
  for (int k = 0; k < Traits<kHeadDim>::kKSteps; ++k) {
    uint32_t qf[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      LdMatrixX4(qs + SwizzledOffset<kHeadDim>(warp * kWarpRows + mt * 16 + (lane & 15),
                                               2 * k + (lane >> 4)),
                 qf[mt]);
    }
    // All of the k-step's K fragments first, so the loads overlap each other and the mma.
    uint32_t b[kNTiles / 2][4];
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      LdMatrixX4(ks + SwizzledOffset<kHeadDim>(np * 16 + key_in, 2 * k + chunk_in), b[np]);
    }
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        Mma(sc[mt][2 * np], qf[mt], b[np][0], b[np][1]);
        Mma(sc[mt][2 * np + 1], qf[mt], b[np][2], b[np][3]);
      }
    }
  }
}

// Softmax of every m-tile, rescale of O, then O += P V.
template <int kHeadDim>
__device__ __forceinline__ void SoftmaxPv(float (&sc)[kMTiles][kNTiles][4], float scale_log2,
                                          uint32_t vs, WarpState<kHeadDim>& st, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    float corr[2];
    Softmax<kNTiles>(sc[mt], scale_log2, st.m[mt], st.l[mt], corr);
#pragma unroll
    for (int d = 0; d < Traits<kHeadDim>::kDTiles; ++d) {
      st.o[mt][d][0] *= corr[0];
      st.o[mt][d][1] *= corr[0];
      st.o[mt][d][2] *= corr[1];
      st.o[mt][d][3] *= corr[1];
    }
  }
  const int key_in = ((lane >> 3) & 1) * 8 + (lane & 7), chunk_in = lane >> 4;
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) {
    uint32_t pa[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      pa[mt][0] = PackBf16(sc[mt][2 * k][0], sc[mt][2 * k][1]);
      pa[mt][1] = PackBf16(sc[mt][2 * k][2], sc[mt][2 * k][3]);
      pa[mt][2] = PackBf16(sc[mt][2 * k + 1][0], sc[mt][2 * k + 1][1]);
      pa[mt][3] = PackBf16(sc[mt][2 * k + 1][2], sc[mt][2 * k + 1][3]);
    }
    // V fragments in groups of kVGroup loads ahead of their mma.
    constexpr int kVGroup = 4;
#pragma unroll
    for (int dg = 0; dg < Traits<kHeadDim>::kDTiles / 2; dg += kVGroup) {
      uint32_t b[kVGroup][4];
#pragma unroll
      for (int i = 0; i < kVGroup; ++i) {
        LdMatrixX4Trans(vs + SwizzledOffset<kHeadDim>(k * 16 + key_in, 2 * (dg + i) + chunk_in),
                        b[i]);
      }
#pragma unroll
      for (int i = 0; i < kVGroup; ++i) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Mma(st.o[mt][2 * (dg + i)], pa[mt], b[i][0], b[i][1]);
          Mma(st.o[mt][2 * (dg + i) + 1], pa[mt], b[i][2], b[i][3]);
        }
      }
    }
  }
}

template <int kHeadDim>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    PrefillAttentionKernel(AttentionArgs a, int32_t per_tile, int32_t group) {
  using T = Traits<kHeadDim>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t idx = int64_t{gridDim.x} - 1 - blockIdx.x;  // latest tiles first
  const int kvh = static_cast<int>(idx % a.dims.num_kv_heads);
  Tile t;
  if (!FindTile(a, idx / a.dims.num_kv_heads, per_tile, &t)) return;
  const int32_t* table = a.block_tables + int64_t{t.s} * a.max_blocks_per_seq;
  const KvSource src = MakeKvSource<kHeadDim>(a, kvh);
  unsigned char* qs = smem;
  unsigned char* ring = smem + T::kQBytes;
  int32_t* ids = reinterpret_cast<int32_t*>(smem + T::kIdsOffset);  // [2][kKeys]
  const int32_t first = t.lo / kKeys, last = t.pos_max / kKeys;
  const int n_tiles = last - first + 1;
  IssueQ<kHeadDim>(a, t, kvh, group, per_tile, qs);
  // Prologue: the first tiles read the table directly; the ids of the tile the first loop
  // iteration issues are staged now.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) {
      const int32_t tile = last - i;
      IssueKv<kHeadDim>(a, t, src, table + ((tile * kKeys) >> src.shift), tile,
                        ring + i * T::kStageBytes);
    }
    CommitGroup();
  }
  if (kStages - 1 < n_tiles) {
    StoreIds<kKeys>(ids + ((kStages - 1) % 2) * kKeys,
                    LoadIds<kKeys>(t, table, src.shift, last - (kStages - 1)), src.shift);
  }
  MaskInfo<kMTiles> mi;
  mi.bad_blocks = AnyBadBlock<kThreads>(a, t, table);
  mi.window = a.sliding_window;
  WarpState<kHeadDim> st;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * kWarpRows + mt * 16 + lane / 4 + 8 * h;
      const bool valid = r / per_tile < group && t.j0 + r % per_tile < t.j_end;
      mi.pos[mt][h] = valid ? t.pos_min + r % per_tile : -1;
      st.m[mt][h] = -INFINITY;
      st.l[mt][h] = 0.0f;
    }
#pragma unroll
    for (int d = 0; d < T::kDTiles; ++d) {
      st.o[mt][d][0] = st.o[mt][d][1] = st.o[mt][d][2] = st.o[mt][d][3] = 0.0f;
    }
  }
  const float scale_log2 = a.scale * kLog2e;
  const int32_t full_lo = a.sliding_window > 0 ? t.pos_max - a.sliding_window + 1 : 0;
  for (int i = 0; i < n_tiles; ++i) {
    WaitGroup<kStages - 2>();
    __syncthreads();  // tile i (and Q) visible to all; everyone is done with tile i - 1
    const int next = i + kStages - 1;
    if (next < n_tiles) {
      IssueKv<kHeadDim>(a, t, src, ids + (next % 2) * kKeys, last - next,
                        ring + (next % kStages) * T::kStageBytes);
    }
    CommitGroup();
    // Ids of the tile the next iteration issues: loaded now, stored after the compute (that
    // slot was last read by the previous iteration's issue, before this iteration's barrier).
    const bool stage_ids = next + 1 < n_tiles;
    const int32_t next_ids = stage_ids ? LoadIds<kKeys>(t, table, src.shift, last - next - 1) : -1;
    const int32_t tile = last - i, key0 = tile * kKeys;
    const bool mask = key0 + kKeys - 1 > t.pos_min || key0 < full_lo || mi.bad_blocks;
    const uint32_t ks = SmemAddress(ring + (i % kStages) * T::kStageBytes);
    float sc[kMTiles][kNTiles][4];
    QKt<kHeadDim>(SmemAddress(qs), ks, sc, lane);
    if (mask) {
      const uint64_t valid =
          mi.bad_blocks ? TileValidBits<kKeys>(a, t, table, key0, lane) : ~uint64_t{0};
      ApplyMask(sc, mi, key0, valid, lane);
    }
    SoftmaxPv<kHeadDim>(sc, scale_log2, ks + T::kTileBytes, st, lane);
    if (stage_ids) StoreIds<kKeys>(ids + ((next + 1) % 2) * kKeys, next_ids, src.shift);
  }
  WaitGroup<0>();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    StoreRows<kHeadDim>(a, t, st.o[mt], st.l[mt], warp * kWarpRows + mt * 16 + lane / 4, kvh, group,
                        per_tile, lane);
  }
}

template <int kHeadDim>
cudaError_t Launch(const AttentionArgs& a, cudaStream_t stream) {
  return LaunchPrefillKernel<PrefillAttentionKernel<kHeadDim>>(
      a, kRows, kThreads, Traits<kHeadDim>::kSmemBytes, stream);
}

}  // namespace

bool PrefillAttentionSupported(const AttentionArgs& a) {
  const int64_t d = a.dims.head_dim;
  if ((d != 64 && d != 128) || a.dims.num_kv_heads <= 0) return false;
  const int64_t group = a.q_heads / a.dims.num_kv_heads;
  const int64_t bs = a.dims.block_size;
  return group >= 1 && group <= kRows && Aligned16(a.cache) && Aligned16(a.q) && bs > 0 &&
         (bs & (bs - 1)) == 0 && a.scale > 0.0f &&
         a.dims.num_kv_heads * d * bs < (int64_t{1} << 31) && a.q_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(a.out) % 4 == 0 && a.out_stride % 2 == 0 &&
         int64_t{a.max_blocks_per_seq} * a.dims.block_size < (int64_t{1} << 31) - kKeys;
}

cudaError_t LaunchPrefillAttentionMma(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_seqs == 0 || a.rows == 0 || a.q_heads == 0) return cudaSuccess;
  return a.dims.head_dim == 64 ? Launch<64>(a, stream) : Launch<128>(a, stream);
}

cudaError_t LaunchPrefillAttention(const AttentionArgs& a, cudaStream_t stream) {
  return WgmmaAvailable() ? LaunchPrefillAttentionWgmma(a, stream)
                          : LaunchPrefillAttentionMma(a, stream);
}

}  // namespace strata::cuda
