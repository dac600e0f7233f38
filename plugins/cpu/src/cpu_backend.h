#pragma once
// The CPU backend object behind the opaque strata_backend handle: its thread pool, its
// options, and the last_error bookkeeping the ABI asks for.
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "cpu_blas.h"
#include "cpu_common.h"
#include "cpu_thread_pool.h"
#include "strata/plugin/abi.h"

namespace strata::cpu {

class CpuBackend {
 public:
  // Parses `config_json` (may be NULL): only "threads": N (1..1024) is read, other keys are
  // ignored. Default threads: std::thread::hardware_concurrency().
  static Status Create(const char* config_json, std::unique_ptr<CpuBackend>* out);

  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  static CpuBackend* FromHandle(strata_backend handle) {
    return reinterpret_cast<CpuBackend*>(handle);
  }
  strata_backend handle() { return reinterpret_cast<strata_backend>(this); }

  ThreadPool& pool() { return pool_; }
  int threads() const { return threads_; }
  const Blas& blas() const { return *blas_; }
  const std::string& device_name() const { return device_name_; }

  // Records prefix + message (truncated to 1 KiB) without throwing. Thread-safe: the message
  // stays readable through LastError on this thread until this thread's next failing call;
  // other threads see the most recent failure on the backend.
  void RecordError(std::string_view prefix, std::string_view message = {}) noexcept;
  const char* LastError();
  // Error bookkeeping for calls that have no backend (create, or a NULL handle).
  static void RecordDetachedError(std::string_view prefix,
                                  std::string_view message = {}) noexcept;
  static const char* DetachedLastError();

 private:
  CpuBackend(int threads, const Blas* blas);

  int threads_;
  ThreadPool pool_;
  const Blas* blas_;  // process-wide, never null
  std::string device_name_;
  std::mutex error_mu_;
  std::string error_;  // guarded by error_mu_
};

// Total and available physical memory in bytes (the CPU device's memory is host memory).
uint64_t TotalMemoryBytes();
uint64_t AvailableMemoryBytes();

}  // namespace strata::cpu
