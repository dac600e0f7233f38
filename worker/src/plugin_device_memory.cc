#include "strata/worker/plugin_device_memory.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"

namespace strata::worker {

absl::StatusOr<std::unique_ptr<PluginDeviceMemory>> PluginDeviceMemory::Create(Backend* backend) {
  const strata_plugin_api_v1& api = backend->api();
  if (api.ipc_export == nullptr || api.ipc_open == nullptr || api.ipc_close == nullptr ||
      api.copy_runs == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin '", backend->info().name,
        "' cannot share device memory between processes (no ipc_* or copy_runs entries)"));
  }
  strata_stream stream = nullptr;
  STRATA_RETURN_IF_ERROR(
      backend->Check(api.stream_create(backend->handle(), &stream), "stream_create"));
  return std::unique_ptr<PluginDeviceMemory>(new PluginDeviceMemory(backend, stream));
}

PluginDeviceMemory::~PluginDeviceMemory() {
  backend_->api().stream_destroy(backend_->handle(), stream_);
}

std::string PluginDeviceMemory::Describe() const {
  const strata_backend_info& info = backend_->info();
  return absl::StrCat(info.name, ":", info.device_name != nullptr ? info.device_name : "?");
}

absl::StatusOr<std::string> PluginDeviceMemory::Export(void* base) {
  uint8_t handle[STRATA_IPC_HANDLE_BYTES] = {};
  STRATA_RETURN_IF_ERROR(
      backend_->Check(backend_->api().ipc_export(backend_->handle(), base, handle), "ipc_export"));
  return std::string(reinterpret_cast<const char*>(handle), sizeof(handle));
}

absl::StatusOr<void*> PluginDeviceMemory::Open(std::string_view handle) {
  if (handle.size() != STRATA_IPC_HANDLE_BYTES) {
    return absl::InvalidArgumentError(absl::StrCat("device memory handle of ", handle.size(),
                                                   " bytes, expected ", STRATA_IPC_HANDLE_BYTES));
  }
  uint8_t h[STRATA_IPC_HANDLE_BYTES];
  std::memcpy(h, handle.data(), sizeof(h));
  void* out = nullptr;
  STRATA_RETURN_IF_ERROR(
      backend_->Check(backend_->api().ipc_open(backend_->handle(), h, &out), "ipc_open"));
  return out;
}

void PluginDeviceMemory::Close(void* mapped) {
  backend_->api().ipc_close(backend_->handle(), mapped);
}

absl::Status PluginDeviceMemory::RegisterHost(void* ptr, size_t bytes) {
  const strata_plugin_api_v1& api = backend_->api();
  if (api.host_register == nullptr || api.host_unregister == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("plugin '", backend_->info().name, "' has no page-locked host memory"));
  }
  return backend_->Check(api.host_register(backend_->handle(), ptr, bytes), "host_register");
}

void PluginDeviceMemory::UnregisterHost(void* ptr) {
  const strata_plugin_api_v1& api = backend_->api();
  if (api.host_unregister != nullptr) api.host_unregister(backend_->handle(), ptr);
}

absl::Status PluginDeviceMemory::Copy(void* dst, const void* src,
                                      std::span<const transport::CopyRun> runs) {
  std::vector<strata_copy_run> r(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    r[i] = {runs[i].src_offset, runs[i].dst_offset, runs[i].length};
  }
  const strata_plugin_api_v1& api = backend_->api();
  std::lock_guard<std::mutex> lock(copy_mu_);
  STRATA_RETURN_IF_ERROR(backend_->Check(
      api.copy_runs(backend_->handle(), stream_, dst, src, r.data(), static_cast<int64_t>(r.size())),
      "copy_runs"));
  return backend_->Check(api.stream_synchronize(backend_->handle(), stream_), "copy_runs sync");
}

}  // namespace strata::worker
