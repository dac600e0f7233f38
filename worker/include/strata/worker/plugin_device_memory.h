#pragma once
// The transport's DeviceMemory services over an engine plugin's backend: CUDA IPC handles
// (ipc_export / ipc_open / ipc_close), page-locked host memory (host_register) and batched
// copies (copy_runs) on a stream of its own,
// so KV handoffs never queue behind the engine's steps.
//
// Lifetime: the backend must outlive this object, and this object the transport Agent that
// uses it (the Agent closes its mappings through it).
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "strata/plugin/plugin.h"
#include "strata/transport/device_memory.h"

namespace strata::worker {

class PluginDeviceMemory final : public transport::DeviceMemory {
 public:
  // FailedPrecondition when the plugin lacks the ipc entries or copy_runs.
  static absl::StatusOr<std::unique_ptr<PluginDeviceMemory>> Create(Backend* backend);
  ~PluginDeviceMemory() override;

  std::string Describe() const override;
  absl::StatusOr<std::string> Export(void* base) override;
  absl::StatusOr<void*> Open(std::string_view handle) override;
  void Close(void* mapped) override;
  // host_register / host_unregister; kUnimplemented when the plugin has none (its device
  // memory is host memory).
  absl::Status RegisterHost(void* ptr, size_t bytes) override;
  void UnregisterHost(void* ptr) override;
  absl::Status Copy(void* dst, const void* src,
                    std::span<const transport::CopyRun> runs) override;

 private:
  PluginDeviceMemory(Backend* backend, strata_stream stream)
      : backend_(backend), stream_(stream) {}

  Backend* const backend_;
  std::mutex copy_mu_;  // one copy at a time on stream_
  const strata_stream stream_;
};

}  // namespace strata::worker
