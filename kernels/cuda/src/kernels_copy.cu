// The batched copy (abi.h copy_runs) between two bases the device reaches: one kernel over the
// concatenation of the runs, cut into fixed-size tiles.
#include <algorithm>

#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr uint64_t kTileBytes = uint64_t{64} << 10;
constexpr uint64_t kMaxBlocks = uint64_t{1} << 20;

// The run holding byte `pos` of the concatenation: the last r with runs[r].start <= pos
// (starts strictly increase from runs[0].start == 0).
__device__ int64_t FindRun(const CopyRunSpan* runs, int64_t n, uint64_t pos) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (runs[mid].start <= pos) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// `words` Words from src to dst, both aligned to the Word, by `lanes` threads; several loads in
// flight per thread before its stores.
template <typename Word>
__device__ __forceinline__ void CopyWords(char* dst, const char* src, uint64_t words,
                                          uint32_t lane, uint32_t lanes) {
  constexpr int kUnroll = 4;
  const Word* s = reinterpret_cast<const Word*>(src);
  Word* d = reinterpret_cast<Word*>(dst);
  uint64_t i = lane;
  for (; i + (kUnroll - 1) * uint64_t{lanes} < words; i += kUnroll * uint64_t{lanes}) {
    Word v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = s[i + k * uint64_t{lanes}];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) d[i + k * uint64_t{lanes}] = v[k];
  }
  for (; i < words; i += lanes) d[i] = s[i];
}

// `bytes` bytes by `lanes` (>= 16) threads: in the widest word (16 bytes down to 1) at which
// source and destination share their alignment, after a head of single bytes that aligns them
// and before a tail of single bytes.
__device__ void CopySegment(char* dst, const char* src, uint64_t bytes, uint32_t lane,
                            uint32_t lanes) {
  const uint32_t phase = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(dst) ^
                                               reinterpret_cast<uintptr_t>(src)) & 15u;
  uint32_t word = 16;
  while (word > 1 && (phase & (word - 1)) != 0) word >>= 1;
  const uint64_t misalign = reinterpret_cast<uintptr_t>(dst) & (word - 1);
  const uint64_t head = std::min<uint64_t>((word - misalign) & (word - 1), bytes);
  if (lane < head) dst[lane] = src[lane];
  const uint64_t words = (bytes - head) / word;
  char* d = dst + head;
  const char* s = src + head;
  switch (word) {
    case 16:
      CopyWords<uint4>(d, s, words, lane, lanes);
      break;
    case 8:
      CopyWords<uint2>(d, s, words, lane, lanes);
      break;
    case 4:
      CopyWords<uint32_t>(d, s, words, lane, lanes);
      break;
    case 2:
      CopyWords<uint16_t>(d, s, words, lane, lanes);
      break;
    default:
      CopyWords<unsigned char>(d, s, words, lane, lanes);
      break;
  }
  const uint64_t done = head + words * word;
  if (lane < bytes - done) dst[done + lane] = src[done + lane];
}

// Grid-stride over tiles of the concatenation. A tile inside one run is copied by the whole
// CTA; a tile spanning several runs gives each warp its own runs.
__global__ void __launch_bounds__(kThreads)
    CopyRunsKernel(char* dst, const char* src, const CopyRunSpan* runs, int64_t n,
                   uint64_t total, uint64_t tiles) {
  __shared__ int64_t bounds[2];
  for (uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const uint64_t lo = tile * kTileBytes;
    const uint64_t hi = std::min(total, lo + kTileBytes);
    if (threadIdx.x == 0) bounds[0] = FindRun(runs, n, lo);
    if (threadIdx.x == 32) bounds[1] = FindRun(runs, n, hi - 1);
    __syncthreads();
    const int64_t first = bounds[0], last = bounds[1];
    __syncthreads();
    if (first == last) {
      const CopyRunSpan run = runs[first];
      const uint64_t at = lo - run.start;
      CopySegment(dst + run.dst_offset + at, src + run.src_offset + at, hi - lo, threadIdx.x,
                  kThreads);
      continue;
    }
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int64_t r = first + warp; r <= last; r += kWarps) {
      const CopyRunSpan run = runs[r];
      const uint64_t end = r + 1 < n ? runs[r + 1].start : total;
      const uint64_t a = std::max(lo, run.start), b = std::min(hi, end);
      CopySegment(dst + run.dst_offset + (a - run.start), src + run.src_offset + (a - run.start),
                  b - a, lane, 32);
    }
  }
}

}  // namespace

cudaError_t LaunchCopyRuns(char* dst, const char* src, const CopyRunSpan* runs, int64_t n,
                           uint64_t total_bytes, cudaStream_t stream) {
  if (n <= 0 || total_bytes == 0) return cudaSuccess;
  const uint64_t tiles = (total_bytes + kTileBytes - 1) / kTileBytes;
  const unsigned blocks = static_cast<unsigned>(std::min(tiles, kMaxBlocks));
  CopyRunsKernel<<<blocks, kThreads, 0, stream>>>(dst, src, runs, n, total_bytes, tiles);
  return cudaGetLastError();
}

}  // namespace strata::cuda
