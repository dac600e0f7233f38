// Hopper's tensor memory accelerator (TMA) and shared-memory transaction barriers (mbarrier),
// as the sm_90a kernels use them: one thread issues a tiled bulk copy described by a tensor map
// (a CUtensorMap kernel parameter) into shared memory, and the copy's bytes complete a
// transaction on an mbarrier that the consumers wait on by phase parity.
//
// Device code (plus the host's tensor-map encoder); included by .cu files built for sm_90a.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda::tma {

// Initializes the barrier at shared address `bar` for `count` arrivals per phase; the other
// threads may use it after FenceInit() and a CTA barrier.
__device__ __forceinline__ void Init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also expects `bytes` more bytes of copies in the current phase.
__device__ __forceinline__ void ArriveExpect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One plain arrival.
__device__ __forceinline__ void Arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// An arrival made when every cp.async this thread issued before it has landed (it counts as
// one of the phase's expected arrivals: .noinc).
__device__ __forceinline__ void CpAsyncArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Waits until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void Wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// A barrier among `threads` threads of the CTA (named barrier `id`, not 0: __syncthreads').
__device__ __forceinline__ void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Warpgroup-wide register budget changes (every warp of the warpgroup executes them): a
// producer warpgroup gives registers back, consumer warpgroups take them.
template <int kRegs>
__device__ __forceinline__ void ReleaseRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void TakeRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Brings the tensor map (a __grid_constant__ kernel parameter) into the descriptor cache.
__device__ __forceinline__ void Prefetch(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Copies the box at coordinates (c0, c1, c2, c3) of a rank-4 tensor map to shared address
// `dst` (aligned as the map's swizzle needs); its bytes complete on barrier `bar`. Boxes or
// parts of boxes outside the tensor are written as zeros and still count their bytes.
__device__ __forceinline__ void Load4d(uint32_t dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                       int32_t c2, int32_t c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Host: a rank-4 bf16 tensor map at `base` (dims innermost first, byte strides of dims 1-3),
// boxes of `box` elements with the 128-byte swizzle the sm_90a kernels' shared-memory tiles use;
// parts of boxes outside the tensor read as zeros. False where the driver has no encoder (it is
// reached through the runtime's entry-point query, so the plugin needs no link to libcuda) or
// refuses the layout.
inline bool EncodeBf16Map4d(const void* base, const cuuint64_t (&dims)[4],
                            const cuuint64_t (&strides)[3], const cuuint32_t (&box)[4],
                            CUtensorMap* map) {
  static const auto encode = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  return encode != nullptr &&
         encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides,
                box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace strata::cuda::tma
