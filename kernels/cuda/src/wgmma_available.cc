// Whether the sm_90a (wgmma) kernels may run here: the launchers of prefill attention and of the
// MoE GEMMs ask before taking them (cuda_kernels.h).
#include <cuda_runtime.h>

#include <atomic>

#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {

namespace {
std::atomic<bool> wgmma_enabled{true};
}  // namespace

void SetWgmmaKernelsEnabled(bool enabled) {
  wgmma_enabled.store(enabled, std::memory_order_relaxed);
}

bool WgmmaAvailable() {
  if (!wgmma_enabled.load(std::memory_order_relaxed)) return false;
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // 0 unknown, 1 no, 2 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached && known[device].load(std::memory_order_acquire) != 0) {
    return known[device].load(std::memory_order_relaxed) == 2;
  }
  int major = 0, minor = 0;
  const bool ok =
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
      major == 9 && minor == 0;
  if (cached) known[device].store(ok ? 2 : 1, std::memory_order_release);
  return ok;
}

}  // namespace strata::cuda
