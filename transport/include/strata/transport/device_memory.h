#pragma once
// Device (GPU) memory for the transport.
//
// The transport links no GPU runtime: what it needs to move device memory comes from a
// DeviceMemory the process supplies (a worker wraps its engine plugin, worker/src/
// plugin_device_memory.h). With one, an Agent registers device regions (MemoryKind::kDevice)
// next to host ones and picks a path per imported peer region:
//
//   ipc     the peer's device allocation is mapped into this process (CUDA IPC: same host, same
//           device or an NVLink/PCIe peer): a write is one batched device copy of all its runs
//           on a transfer stream, then the optional notification over UCX.
//   staged  the peer's memory cannot be mapped here (another host, a device without peer
//           access, or the agent was told to stage): pieces of the write are copied to
//           page-locked host buffers, sent over UCX and copied into the peer's device memory
//           by the peer, pipelined (see docs/transport.md).
//
// Which path a region got is reported by Agent::RegionPath and counted in AgentStats.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::transport {

enum class MemoryKind : uint8_t { kHost = 0, kDevice = 1 };

const char* MemoryKindName(MemoryKind kind);

// One contiguous byte range of a batched device copy.
struct CopyRun {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
};

// Threading: every method may be called from any thread, concurrently.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // Short description for logs, e.g. "cuda:NVIDIA H100 80GB HBM3".
  virtual std::string Describe() const = 0;

  // An opaque handle to the allocation that starts at `base` (the whole allocation), which a
  // process on the same host passes to Open. kUnimplemented when this memory cannot be shared.
  virtual absl::StatusOr<std::string> Export(void* base) = 0;
  // Maps an allocation another process exported; the result stays valid until Close.
  // kUnimplemented / kFailedPrecondition when this process cannot reach that memory (another
  // host, a device without peer access): the caller then needs another path.
  virtual absl::StatusOr<void*> Open(std::string_view handle) = 0;
  virtual void Close(void* mapped) = 0;

  // Page-locks host memory [ptr, ptr + bytes) so that Copy moves it to or from the device at
  // full speed. kUnimplemented when this memory needs no page-locking (its device memory is
  // host memory) or cannot do it; Copy then still works on that range, maybe slower.
  virtual absl::Status RegisterHost(void* ptr, size_t bytes) = 0;
  // Undoes RegisterHost(ptr, ...); no copy on the range may be in flight.
  virtual void UnregisterHost(void* ptr) = 0;

  // Copies every run from src + src_offset to dst + dst_offset as one batched operation and
  // returns when all bytes are in place (visible to any later device work, in any process).
  // src and dst are each device memory (local or opened) or host memory (RegisterHost'd).
  virtual absl::Status Copy(void* dst, const void* src, std::span<const CopyRun> runs) = 0;
};

}  // namespace strata::transport
