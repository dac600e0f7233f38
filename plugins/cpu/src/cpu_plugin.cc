// libstrata_cpu.so: the fp32 CPU reference plugin. This file holds the exported entry table
// (lifecycle and op trampolines from plugins/common), get_info, memory, streams and copies; the
// compute ops live in cpu_ops_*.cc.
//
// Every entry point catches everything: no C++ exception crosses the C ABI. Ops run
// synchronously when called, so a stream is only a token and stream_synchronize has nothing
// to wait for.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "cpu_backend.h"
#include "cpu_ops.h"
#include "strata/plugin/abi.h"
#include "strata/plugin_common/copy_runs.h"
#include "strata/plugin_common/entry.h"

struct strata_stream_s {
  uint32_t magic;
};

namespace strata::cpu {
namespace {

constexpr size_t kAlignment = 64;
constexpr uint32_t kStreamMagic = 0x53545243;  // "STRC"

// Every entry runs on the backend itself: ops complete on the calling thread.
template <typename Body>
strata_status Guard(strata_backend handle, const char* op, Body&& body) noexcept {
  return plugin_common::Guard<CpuBackend>(handle, op, std::forward<Body>(body));
}

// How plugin_common's op entries run this plugin's ops (the stream is only a token).
struct Entries {
  using Backend = CpuBackend;
  using Context = CpuBackend;
  template <typename Body>
  static strata_status RunOp(strata_backend b, strata_stream, const char* op,
                             Body&& body) noexcept {
    return Guard(b, op, std::forward<Body>(body));
  }
};

// ---- lifecycle --------------------------------------------------------------------------

strata_status GetInfo(strata_backend b, strata_backend_info* out) noexcept {
  return Guard(b, "get_info", [&](CpuBackend& be) {
    if (out == nullptr) return InvalidArgument("get_info", "out is NULL");
    out->name = "cpu";
    out->device_name = be.device_name().c_str();
    out->weight_dtype = STRATA_DTYPE_F32;
    out->act_dtype = STRATA_DTYPE_F32;
    out->kv_dtype = STRATA_DTYPE_F32;
    out->total_memory = TotalMemoryBytes();
    out->free_memory = AvailableMemoryBytes();
    return Status();
  });
}

// ---- memory and streams ---------------------------------------------------------------

// Large buffers (weights, the KV pool) are 2 MiB aligned and asked to be backed by huge pages:
// decode streams through gigabytes of them, and attention touches one head's rows a page apart,
// so 4 KiB pages would cost a TLB miss every few rows.
void* AllocateAligned(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t align = bytes >= 2 * kHugePage ? kHugePage : kAlignment;
  if (bytes > SIZE_MAX - align) return nullptr;
  // aligned_alloc wants a multiple of the alignment; 0 bytes still yields a unique pointer.
  const size_t rounded = bytes == 0 ? align : (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p != nullptr && align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

strata_status Alloc(strata_backend b, size_t bytes, void** out) noexcept {
  return Guard(b, "alloc", [&](CpuBackend&) {
    if (out == nullptr) return InvalidArgument("alloc", "out is NULL");
    *out = AllocateAligned(bytes);
    if (*out == nullptr) {
      return Status(STRATA_ERR_OUT_OF_MEMORY, Cat("alloc: cannot allocate ", bytes, " bytes"));
    }
    return Status();
  });
}

void Free(strata_backend, void* ptr) noexcept { std::free(ptr); }

strata_status StreamCreate(strata_backend b, strata_stream* out) noexcept {
  return Guard(b, "stream_create", [&](CpuBackend&) {
    if (out == nullptr) return InvalidArgument("stream_create", "out is NULL");
    *out = new strata_stream_s{kStreamMagic};
    return Status();
  });
}

void StreamDestroy(strata_backend, strata_stream stream) noexcept { delete stream; }

strata_status StreamSynchronize(strata_backend b, strata_stream stream) noexcept {
  return Guard(b, "stream_synchronize", [&](CpuBackend&) {
    if (stream != nullptr && stream->magic != kStreamMagic) {
      return InvalidArgument("stream_synchronize", "not a stream of this plugin");
    }
    return Status();  // ops complete before they return
  });
}

template <const char* kOp>
strata_status Copy(strata_backend b, strata_stream, void* dst, const void* src,
                   size_t bytes) noexcept {
  return Guard(b, kOp, [&](CpuBackend& be) {
    if (bytes == 0) return Status();
    if (dst == nullptr || src == nullptr) return InvalidArgument(kOp, "dst or src is NULL");
    const char* d = static_cast<const char*>(dst);
    const char* s = static_cast<const char*>(src);
    if (d < s + bytes && s < d + bytes) {
      std::memmove(dst, src, bytes);
    } else {
      ParallelCopy(be, dst, src, bytes);
    }
    return Status();
  });
}

constexpr char kCopyH2D[] = "copy_h2d";
constexpr char kCopyD2H[] = "copy_d2h";
constexpr char kCopyD2D[] = "copy_d2d";

// Device memory is host memory: one memcpy per run (a large run split over the pool). Every run
// is checked before the first byte moves, so a failing call writes nothing.
strata_status CopyRuns(strata_backend b, strata_stream stream, void* dst, const void* src,
                       const strata_copy_run* runs, int64_t n) noexcept {
  constexpr const char* kOp = "copy_runs";
  return Guard(b, kOp, [&](CpuBackend& be) {
    if (stream != nullptr && stream->magic != kStreamMagic) {
      return InvalidArgument(kOp, "not a stream of this plugin");
    }
    plugin_common::CopyRunsSummary summary;
    STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckCopyRuns(kOp, dst, src, runs, n, &summary));
    for (int64_t i = 0; i < n; ++i) {
      ParallelCopy(be, static_cast<char*>(dst) + runs[i].dst_offset,
                   static_cast<const char*>(src) + runs[i].src_offset, runs[i].bytes);
    }
    return Status();
  });
}

// ---- the entry table ------------------------------------------------------------------

constexpr strata_plugin_api_v1 MakeApi() {
  strata_plugin_api_v1 api = plugin_common::CommonApi<Entries>("cpu");
  api.get_info = GetInfo;
  api.alloc = Alloc;
  api.free = Free;
  api.stream_create = StreamCreate;
  api.stream_destroy = StreamDestroy;
  api.stream_synchronize = StreamSynchronize;
  api.copy_h2d = Copy<kCopyH2D>;
  api.copy_d2h = Copy<kCopyD2H>;
  api.copy_d2d = Copy<kCopyD2D>;
  api.copy_runs = CopyRuns;
  return api;
}

constexpr strata_plugin_api_v1 kApi = MakeApi();

}  // namespace
}  // namespace strata::cpu

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* strata_plugin_get_api(void) {
  return &strata::cpu::kApi;
}
