#pragma once
// Host side of the engine plugin ABI (strata/plugin/abi.h): loading a plugin library,
// creating a backend, and RAII ownership of backend objects. Nothing here is C++ across the
// boundary: the plugin only ever sees the C ABI.
//
// Threading: a Plugin is immutable after Load and safe to share. A Backend may be used from
// several threads only on distinct streams (the ABI's rule).
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/plugin/abi.h"

namespace strata {

class Plugin {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL), resolve strata_plugin_get_api, check the version and
  // the required entries. Errors name the file: NotFound (no file), InvalidArgument (not a
  // plugin, missing symbol or entry, only some entries of the ipc trio), FailedPrecondition
  // (API version mismatch).
  static absl::StatusOr<std::shared_ptr<Plugin>> Load(const std::string& path);

  // Checks a table (from a file or built in) the way Load does; `origin` names it in errors.
  static absl::StatusOr<std::shared_ptr<Plugin>> FromTable(const strata_plugin_api_v1* api,
                                                           std::string origin,
                                                           void* dl_handle = nullptr);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // A full-size copy of the plugin's table (optional entries past its struct_size are NULL).
  const strata_plugin_api_v1& api() const { return api_; }
  const std::string& origin() const { return origin_; }
  bool has_moe() const { return api_.moe_route != nullptr && api_.moe_experts != nullptr; }
  bool has_sample() const { return api_.sample != nullptr; }
  bool has_host_register() const {
    return api_.host_register != nullptr && api_.host_unregister != nullptr;
  }
  // ipc_export, ipc_open and ipc_close (Load refuses a table with only some of them).
  bool has_ipc() const {
    return api_.ipc_export != nullptr && api_.ipc_open != nullptr && api_.ipc_close != nullptr;
  }
  bool has_copy_runs() const { return api_.copy_runs != nullptr; }
  bool has_mask_logits() const { return api_.mask_logits != nullptr; }
  bool has_graphs() const {
    return api_.graph_capture_begin != nullptr && api_.graph_capture_end != nullptr &&
           api_.graph_launch != nullptr && api_.graph_destroy != nullptr;
  }

 private:
  Plugin(const strata_plugin_api_v1& api, std::string origin, void* dl_handle)
      : api_(api), origin_(std::move(origin)), dl_handle_(dl_handle) {}
  strata_plugin_api_v1 api_;
  std::string origin_;
  void* dl_handle_;
};

// Resolves a user-facing plugin reference: a path to a .so (anything containing '/' or ending
// in ".so"), or a short name NAME looked up as libstrata_NAME.so in $STRATA_PLUGIN_DIR, then
// next to the running executable, then in ../lib/strata relative to it.
absl::StatusOr<std::shared_ptr<Plugin>> LoadPlugin(const std::string& name_or_path);

class Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(std::shared_ptr<Plugin> plugin,
                                                         const std::string& config_json = "");
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const strata_plugin_api_v1& api() const { return plugin_->api(); }
  strata_backend handle() const { return handle_; }
  const Plugin& plugin() const { return *plugin_; }
  const strata_backend_info& info() const { return info_; }
  // The default stream, created with the backend.
  strata_stream stream() const { return stream_; }

  // Converts an ABI status into absl::Status with the backend's message; `what` names the op.
  absl::Status Check(strata_status status, const char* what) const;

  absl::StatusOr<void*> Alloc(size_t bytes);
  void Free(void* ptr);
  absl::Status Synchronize() { return Check(api().stream_synchronize(handle_, stream_), "sync"); }
  // Enqueued on the default stream. From page-locked host memory (RegisterHost) the copy may
  // still be reading `src` when this returns: leave it untouched until Synchronize.
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes);
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes);  // synchronizes
  // copy_d2h without waiting: `dst` holds the bytes after the next Synchronize.
  absl::Status CopyToHostAsync(void* dst, const void* src, size_t bytes);
  // Page-locks [ptr, ptr + bytes) for asynchronous device copies (the plugin's host_register);
  // Unimplemented when the plugin has no such entry (its copies then work on pageable memory).
  absl::Status RegisterHost(void* ptr, size_t bytes);
  void UnregisterHost(void* ptr);

  // Device memory shared between processes on one host (the plugin's ipc entries; Unimplemented
  // when it has none). IpcExport: a STRATA_IPC_HANDLE_BYTES-byte handle naming the allocation
  // `ptr` (a value Alloc returned), valid while it lives. IpcOpen: maps the allocation another
  // process exported and returns its base, device memory of this backend until IpcClose (the
  // backend's destruction closes what is left); InvalidArgument for a handle of the wrong length,
  // Unimplemented when this backend cannot reach that memory (the exporting process itself,
  // another host, a device without peer access).
  absl::StatusOr<std::string> IpcExport(void* ptr);
  absl::StatusOr<void*> IpcOpen(std::string_view handle);
  void IpcClose(void* ptr);

  // The plugin's copy_runs on `stream` (nullptr: the default stream): for every run,
  // run.bytes bytes from src + run.src_offset to dst + run.dst_offset, as one batched
  // operation. dst and src are device memory of this backend (Alloc, IpcOpen) or host memory
  // registered with RegisterHost; destination ranges overlap neither each other nor a source
  // range. Asynchronous like the other copies: the bytes are there after the stream's next
  // synchronize. Unimplemented when the plugin has no copy_runs entry.
  absl::Status CopyRuns(strata_stream stream, void* dst, const void* src,
                        std::span<const strata_copy_run> runs);

 private:
  Backend(std::shared_ptr<Plugin> plugin, strata_backend handle)
      : plugin_(std::move(plugin)), handle_(handle) {}
  std::shared_ptr<Plugin> plugin_;
  strata_backend handle_;
  strata_stream stream_ = nullptr;
  strata_backend_info info_{};
};

// Owned device memory of one backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(Backend* backend, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  void Reset();

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

size_t DtypeSize(strata_dtype dtype);
const char* DtypeName(strata_dtype dtype);

// Builds a tensor descriptor; row_stride 0 means dense.
strata_tensor MakeTensor(void* data, strata_dtype dtype, std::initializer_list<int64_t> shape,
                         int64_t row_stride = 0);

}  // namespace strata
