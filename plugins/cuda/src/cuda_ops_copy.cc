// copy_runs: runs that continue one another in both source and destination are merged first.
// Device to device (device memory from alloc or ipc_open on this backend's device): one kernel
// (LaunchCopyRuns) over the run list, uploaded to the stream's run-list buffer. With page-locked
// host memory (host_register) on either side: one cudaMemcpyBatchAsync on the copy engines. A
// single merged run takes one cudaMemcpyAsync either way.
#include <vector>

#include "cuda_common.h"
#include "cuda_ops.h"
#include "strata/kernels/cuda_kernels.h"
#include "strata/plugin_common/copy_runs.h"

namespace strata::cuda {
namespace {

constexpr const char* kOp = "copy_runs";

enum class Where { kDevice, kHost };

// Where `ptr` lives: INVALID_ARGUMENT for pageable host memory and another device's memory.
Status Locate(const char* name, const void* ptr, int device, Where* where) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) return CudaStatus(kOp, err, "cudaPointerGetAttributes");
  switch (attr.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      if (attr.device != device) {
        return InvalidArgument(kOp, name, " is memory of device ", attr.device,
                               ", not of this backend's device ", device);
      }
      *where = Where::kDevice;
      return Status();
    case cudaMemoryTypeHost:
      *where = Where::kHost;
      return Status();
    default:
      return InvalidArgument(kOp, name, " is host memory not registered with host_register");
  }
}

// Calls fn(run) for the runs with each maximal chain of runs that continue one another (in
// source and destination alike) merged into one; returns how many it passed.
template <typename Fn>
int64_t ForEachMerged(const strata_copy_run* runs, int64_t n, Fn&& fn) {
  int64_t count = 0;
  strata_copy_run cur = runs[0];
  for (int64_t i = 1; i < n; ++i) {
    const strata_copy_run& r = runs[i];
    if (r.src_offset == cur.src_offset + cur.bytes && r.dst_offset == cur.dst_offset + cur.bytes) {
      cur.bytes += r.bytes;
      continue;
    }
    fn(cur);
    ++count;
    cur = r;
  }
  fn(cur);
  return count + 1;
}

Status CopyOne(Stream& s, char* dst, const char* src, const strata_copy_run& r) {
  return CudaStatus(
      kOp,
      cudaMemcpyAsync(dst + r.dst_offset, src + r.src_offset, r.bytes, cudaMemcpyDefault, s.stream),
      "cudaMemcpyAsync");
}

// Device to device: the merged runs with their starts in the concatenation, then one kernel.
Status CopyOnDevice(Stream& s, char* dst, const char* src, const strata_copy_run* runs, int64_t n,
                    uint64_t total) {
  const int64_t merged = ForEachMerged(runs, n, [](const strata_copy_run&) {});
  if (merged == 1) return CopyOne(s, dst, src, {runs[0].src_offset, runs[0].dst_offset, total});
  const size_t bytes = static_cast<size_t>(merged) * sizeof(CopyRunSpan);
  void* host = nullptr;
  void* device = nullptr;
  STRATA_PLUGIN_RETURN_IF_ERROR(s.ReserveRunList(kOp, bytes, &host, &device));
  auto* spans = static_cast<CopyRunSpan*>(host);
  uint64_t start = 0;
  ForEachMerged(runs, n, [&](const strata_copy_run& r) {
    *spans++ = CopyRunSpan{r.src_offset, r.dst_offset, start};
    start += r.bytes;
  });
  STRATA_PLUGIN_RETURN_IF_ERROR(s.UploadRunList(kOp, bytes));
  return CudaStatus(
      kOp,
      LaunchCopyRuns(dst, src, static_cast<const CopyRunSpan*>(device), merged, total, s.stream),
      "kernel launch");
}

// Either side in page-locked host memory: one batch on the copy engines, each source read in
// stream order.
Status CopyBatch(Stream& s, char* dst, const char* src, const strata_copy_run* runs, int64_t n) {
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  ForEachMerged(runs, n, [&](const strata_copy_run& r) {
    dsts.push_back(dst + r.dst_offset);
    srcs.push_back(src + r.src_offset);
    sizes.push_back(r.bytes);
  });
  if (sizes.size() == 1) {
    return CudaStatus(kOp, cudaMemcpyAsync(dsts[0], srcs[0], sizes[0], cudaMemcpyDefault, s.stream),
                      "cudaMemcpyAsync");
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t first_copy = 0;  // attr applies to every copy
  return CudaStatus(kOp,
                    cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(),
                                         &attr, &first_copy, 1, s.stream),
                    "cudaMemcpyBatchAsync");
}

}  // namespace

Status CopyRuns(Stream& s, void* dst, const void* src, const strata_copy_run* runs, int64_t n) {
  plugin_common::CopyRunsSummary sum;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckCopyRuns(kOp, dst, src, runs, n, &sum));
  if (n == 0) return Status();
  int device = 0;
  STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(kOp, cudaGetDevice(&device), "cudaGetDevice"));
  Where dst_at = Where::kDevice, src_at = Where::kDevice;
  STRATA_PLUGIN_RETURN_IF_ERROR(Locate("dst", dst, device, &dst_at));
  STRATA_PLUGIN_RETURN_IF_ERROR(Locate("src", src, device, &src_at));
  s.writes.Wrote({ByteRange{static_cast<char*>(dst) + sum.dst_begin,
                            static_cast<size_t>(sum.dst_end - sum.dst_begin)}});
  char* d = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  if (dst_at == Where::kDevice && src_at == Where::kDevice) {
    return CopyOnDevice(s, d, from, runs, n, sum.total_bytes);
  }
  return CopyBatch(s, d, from, runs, n);
}

}  // namespace strata::cuda
