// Small device-side building blocks the CUDA kernels share: cp.async copies into shared memory,
// programmatic dependent launch, and raising a kernel's dynamic shared-memory limit once per
// device. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace strata::cuda {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; zero-fills the destination when !valid (src is then
// not read, but must still be a valid address expression).
__device__ __forceinline__ void CopyAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CommitGroup() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Programmatic dependent launch (sm_90, PTX griddepcontrol). Kernels launched with
// programmatic stream serialization may be scheduled before their predecessor on the stream
// has finished: WaitForPrerequisites blocks until that predecessor has completed and its
// memory is visible (a no-op without such a predecessor), so nothing is read or written early;
// AllowDependents lets the next grid be scheduled now (it still waits the same way).
__device__ __forceinline__ void WaitForPrerequisites() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void AllowDependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
}

// Whether `p` allows 16-byte vector loads and stores (the launchers' alignment checks).
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Streaming multiprocessors of the current device (cached per device); for persistent grids.
inline int SmCount() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 1;
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable && (count = cached[device].load(std::memory_order_relaxed)) > 0) return count;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      count <= 0) {
    return 1;
  }
  if (cacheable) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

// Grid of a persistent kernel whose warps stride over `warp_units` units of work: at most
// `ctas_per_sm` CTAs of `warps_per_cta` warps per SM, fewer when there are fewer units.
inline dim3 PersistentGrid(int64_t warp_units, int warps_per_cta, int ctas_per_sm) {
  const int64_t ctas = (warp_units + warps_per_cta - 1) / warps_per_cta;
  const int64_t most = int64_t{SmCount()} * ctas_per_sm;
  return dim3(static_cast<unsigned>(ctas < 1 ? 1 : (ctas < most ? ctas : most)));
}

// Launches `kernel`; with `pdl`, with programmatic stream serialization: it may then be
// scheduled while its predecessor on the stream is still running, so it must call
// WaitForPrerequisites before it reads or writes memory that any predecessor touches (the
// kernels launched so do it first).
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                         cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// LaunchKernel with programmatic stream serialization.
template <typename... Params, typename... Args>
cudaError_t LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                      cudaStream_t stream, Args... args) {
  return LaunchKernel(true, kernel, grid, block, shared, stream, args...);
}

// Raises kKernel's dynamic shared-memory limit to `bytes` on the current device, once per
// device (a flag per instantiation, i.e. per kernel).
template <auto kKernel>
cudaError_t AllowDynamicSmem(int bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> ready[kMaxDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached && ready[device].load(std::memory_order_acquire)) return cudaSuccess;
  err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && cached) ready[device].store(true, std::memory_order_release);
  return err;
}

}  // namespace strata::cuda
