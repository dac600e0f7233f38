#include "strata/plugin/plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata {
namespace {

// Entries every v1 plugin must provide (the MoE pair is optional).
std::vector<const char*> MissingRequiredEntries(const strata_plugin_api_v1& a) {
  std::vector<const char*> missing;
#define STRATA_REQUIRE_ENTRY(field) \
  if (a.field == nullptr) missing.push_back(#field)
  STRATA_REQUIRE_ENTRY(create);
  STRATA_REQUIRE_ENTRY(destroy);
  STRATA_REQUIRE_ENTRY(last_error);
  STRATA_REQUIRE_ENTRY(get_info);
  STRATA_REQUIRE_ENTRY(alloc);
  STRATA_REQUIRE_ENTRY(free);
  STRATA_REQUIRE_ENTRY(stream_create);
  STRATA_REQUIRE_ENTRY(stream_destroy);
  STRATA_REQUIRE_ENTRY(stream_synchronize);
  STRATA_REQUIRE_ENTRY(copy_h2d);
  STRATA_REQUIRE_ENTRY(copy_d2h);
  STRATA_REQUIRE_ENTRY(copy_d2d);
  STRATA_REQUIRE_ENTRY(embedding);
  STRATA_REQUIRE_ENTRY(rms_norm);
  STRATA_REQUIRE_ENTRY(gemm);
  STRATA_REQUIRE_ENTRY(rope);
  STRATA_REQUIRE_ENTRY(silu_mul);
  STRATA_REQUIRE_ENTRY(gather_rows);
  STRATA_REQUIRE_ENTRY(kv_append);
  STRATA_REQUIRE_ENTRY(attention_prefill);
  STRATA_REQUIRE_ENTRY(attention_decode);
  STRATA_REQUIRE_ENTRY(kv_copy_blocks);
  STRATA_REQUIRE_ENTRY(kv_gather);
  STRATA_REQUIRE_ENTRY(kv_scatter);
#undef STRATA_REQUIRE_ENTRY
  return missing;
}

// The ipc entries come as a trio: a table with some of them names the ones it lacks.
std::vector<const char*> MissingIpcEntries(const strata_plugin_api_v1& a) {
  const bool any = a.ipc_export != nullptr || a.ipc_open != nullptr || a.ipc_close != nullptr;
  std::vector<const char*> missing;
  if (!any) return missing;
  if (a.ipc_export == nullptr) missing.push_back("ipc_export");
  if (a.ipc_open == nullptr) missing.push_back("ipc_open");
  if (a.ipc_close == nullptr) missing.push_back("ipc_close");
  return missing;
}

std::string ExecutableDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return exe.parent_path().string();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Plugin>> Plugin::FromTable(const strata_plugin_api_v1* api,
                                                          std::string origin, void* dl_handle) {
  auto fail = [&](absl::Status status) {
    if (dl_handle != nullptr) dlclose(dl_handle);
    return status;
  };
  if (api == nullptr) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", STRATA_PLUGIN_ENTRY_SYMBOL, "() returned NULL")));
  }
  if (api->api_version != STRATA_PLUGIN_API_VERSION) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat(origin, ": plugin API version ", api->api_version,
                     " does not match this strata's version ", STRATA_PLUGIN_API_VERSION)));
  }
  // Entries from `sample` on are optional: a table that ends before them is complete.
  constexpr size_t kRequiredBytes = offsetof(strata_plugin_api_v1, sample);
  if (api->struct_size < kRequiredBytes) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat(origin, ": plugin API table is ", api->struct_size, " bytes, expected ",
                     sizeof(strata_plugin_api_v1), " (built against an older header?)")));
  }
  auto missing = MissingRequiredEntries(*api);
  if (!missing.empty()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(origin, ": plugin lacks required entries: ", absl::StrJoin(missing, ", "))));
  }
  // The host reads its own full-size copy: optional entries past the plugin's table are NULL.
  strata_plugin_api_v1 table{};
  std::memcpy(&table, api, std::min<size_t>(api->struct_size, sizeof(table)));
  missing = MissingIpcEntries(table);
  if (!missing.empty()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(origin, ": plugin has only some of the ipc entries; missing: ",
                     absl::StrJoin(missing, ", "))));
  }
  return std::shared_ptr<Plugin>(new Plugin(table, std::move(origin), dl_handle));
}

absl::StatusOr<std::shared_ptr<Plugin>> Plugin::Load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": plugin file not found"));
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot load plugin: ", err ? err : "unknown dlopen error"));
  }
  dlerror();
  void* sym = dlsym(handle, STRATA_PLUGIN_ENTRY_SYMBOL);
  if (sym == nullptr) {
    dlclose(handle);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a strata plugin (no symbol ", STRATA_PLUGIN_ENTRY_SYMBOL, ")"));
  }
  auto get_api = reinterpret_cast<strata_plugin_get_api_fn>(sym);
  return FromTable(get_api(), path, handle);
}

Plugin::~Plugin() {
  if (dl_handle_ != nullptr) dlclose(dl_handle_);
}

absl::StatusOr<std::shared_ptr<Plugin>> LoadPlugin(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".so");
  if (is_path) return Plugin::Load(name_or_path);
  const std::string file = absl::StrCat("libstrata_", name_or_path, ".so");
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("STRATA_PLUGIN_DIR")) dirs.push_back(env);
  const std::string exe_dir = ExecutableDir();
  dirs.push_back(exe_dir);
  dirs.push_back(exe_dir + "/../lib/strata");
  for (const auto& dir : dirs) {
    std::string candidate = dir + "/" + file;
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) return Plugin::Load(candidate);
  }
  return absl::NotFoundError(absl::StrCat("plugin '", name_or_path, "' not found: looked for ",
                                          file, " in ", absl::StrJoin(dirs, ", ")));
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::unique_ptr<Backend>> Backend::Create(std::shared_ptr<Plugin> plugin,
                                                         const std::string& config_json) {
  strata_backend handle = nullptr;
  strata_status st =
      plugin->api().create(config_json.empty() ? nullptr : config_json.c_str(), &handle);
  if (st != STRATA_OK || handle == nullptr) {
    // Without a backend, last_error(NULL) is the failed create's message (both plugins keep
    // a detached per-thread message for it).
    const char* msg = plugin->api().last_error(nullptr);
    return absl::InvalidArgumentError(absl::StrCat(plugin->origin(), ": create backend failed: ",
                                                   msg != nullptr && *msg ? msg : "no message",
                                                   " (status ", st, ")"));
  }
  std::unique_ptr<Backend> backend(new Backend(plugin, handle));
  auto status = backend->Check(plugin->api().get_info(handle, &backend->info_), "get_info");
  if (!status.ok()) return status;
  status = backend->Check(plugin->api().stream_create(handle, &backend->stream_), "stream_create");
  if (!status.ok()) return status;
  return backend;
}

Backend::~Backend() {
  if (stream_ != nullptr) api().stream_destroy(handle_, stream_);
  api().destroy(handle_);
}

absl::Status Backend::Check(strata_status status, const char* what) const {
  if (status == STRATA_OK) return absl::OkStatus();
  const char* msg = api().last_error(handle_);
  std::string text = absl::StrCat(plugin_->origin(), ": ", what, ": ", msg ? msg : "error");
  switch (status) {
    case STRATA_ERR_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(text);
    case STRATA_ERR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(text);
    case STRATA_ERR_UNSUPPORTED:
      return absl::UnimplementedError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<void*> Backend::Alloc(size_t bytes) {
  void* ptr = nullptr;
  absl::Status st = Check(api().alloc(handle_, bytes, &ptr), "alloc");
  if (!st.ok()) return st;
  return ptr;
}

void Backend::Free(void* ptr) {
  if (ptr != nullptr) api().free(handle_, ptr);
}

absl::Status Backend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  return Check(api().copy_h2d(handle_, stream_, dst, src, bytes), "copy_h2d");
}

absl::Status Backend::CopyToHost(void* dst, const void* src, size_t bytes) {
  absl::Status st = CopyToHostAsync(dst, src, bytes);
  if (!st.ok()) return st;
  return Synchronize();
}

absl::Status Backend::CopyToHostAsync(void* dst, const void* src, size_t bytes) {
  return Check(api().copy_d2h(handle_, stream_, dst, src, bytes), "copy_d2h");
}

absl::Status Backend::RegisterHost(void* ptr, size_t bytes) {
  if (!plugin_->has_host_register()) {
    return absl::UnimplementedError(
        absl::StrCat(plugin_->origin(), ": the plugin cannot page-lock host memory"));
  }
  return Check(api().host_register(handle_, ptr, bytes), "host_register");
}

void Backend::UnregisterHost(void* ptr) {
  if (api().host_unregister != nullptr) api().host_unregister(handle_, ptr);
}

absl::StatusOr<std::string> Backend::IpcExport(void* ptr) {
  if (!plugin_->has_ipc()) {
    return absl::UnimplementedError(absl::StrCat(
        plugin_->origin(), ": the plugin cannot share device memory between processes"));
  }
  std::string handle(STRATA_IPC_HANDLE_BYTES, '\0');
  absl::Status st = Check(
      api().ipc_export(handle_, ptr, reinterpret_cast<uint8_t*>(handle.data())), "ipc_export");
  if (!st.ok()) return st;
  return handle;
}

absl::StatusOr<void*> Backend::IpcOpen(std::string_view handle) {
  if (!plugin_->has_ipc()) {
    return absl::UnimplementedError(absl::StrCat(
        plugin_->origin(), ": the plugin cannot share device memory between processes"));
  }
  if (handle.size() != STRATA_IPC_HANDLE_BYTES) {
    return absl::InvalidArgumentError(absl::StrCat(plugin_->origin(), ": ipc_open: a handle is ",
                                                   STRATA_IPC_HANDLE_BYTES, " bytes, got ",
                                                   handle.size()));
  }
  void* ptr = nullptr;
  absl::Status st = Check(
      api().ipc_open(handle_, reinterpret_cast<const uint8_t*>(handle.data()), &ptr), "ipc_open");
  if (!st.ok()) return st;
  return ptr;
}

void Backend::IpcClose(void* ptr) {
  if (ptr != nullptr && api().ipc_close != nullptr) api().ipc_close(handle_, ptr);
}

absl::Status Backend::CopyRuns(strata_stream stream, void* dst, const void* src,
                               std::span<const strata_copy_run> runs) {
  if (!plugin_->has_copy_runs()) {
    return absl::UnimplementedError(
        absl::StrCat(plugin_->origin(), ": the plugin has no batched copy (copy_runs)"));
  }
  return Check(api().copy_runs(handle_, stream != nullptr ? stream : stream_, dst, src,
                               runs.data(), static_cast<int64_t>(runs.size())),
               "copy_runs");
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(Backend* backend, size_t bytes) {
  DeviceBuffer buf;
  auto ptr = backend->Alloc(bytes == 0 ? 1 : bytes);
  if (!ptr.ok()) return ptr.status();
  buf.backend_ = backend;
  buf.data_ = *ptr;
  buf.bytes_ = bytes;
  return buf;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    backend_ = other.backend_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.backend_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (backend_ != nullptr && data_ != nullptr) backend_->Free(data_);
  backend_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

size_t DtypeSize(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32:
      return 4;
    case STRATA_DTYPE_F16:
      return 2;
    case STRATA_DTYPE_BF16:
      return 2;
    case STRATA_DTYPE_I32:
      return 4;
  }
  return 0;
}

const char* DtypeName(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32:
      return "f32";
    case STRATA_DTYPE_F16:
      return "f16";
    case STRATA_DTYPE_BF16:
      return "bf16";
    case STRATA_DTYPE_I32:
      return "i32";
  }
  return "unknown";
}

strata_tensor MakeTensor(void* data, strata_dtype dtype, std::initializer_list<int64_t> shape,
                         int64_t row_stride) {
  strata_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t d : shape) t.shape[i++] = d;
  t.row_stride = row_stride;
  return t;
}

}  // namespace strata
