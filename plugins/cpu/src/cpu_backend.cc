#include "cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace strata::cpu {
namespace {

// Each thread keeps its own copy of the last message it read or caused, so a pointer returned
// by last_error is never overwritten by another thread's failure. Trivially destructible on
// purpose: the plugin can be dlclose'd while threads that used it live on.
struct ThreadError {
  const void* owner;
  char message[1024];
};
thread_local ThreadError tls_error = {nullptr, {0}};

// Copies prefix + message into this thread's buffer (truncating); never allocates.
void StoreThreadError(const void* owner, std::string_view prefix, std::string_view message) {
  tls_error.owner = owner;
  size_t n = 0;
  for (std::string_view part : {prefix, message}) {
    const size_t take = std::min(part.size(), sizeof(tls_error.message) - 1 - n);
    if (take > 0) std::memcpy(tls_error.message + n, part.data(), take);
    n += take;
  }
  tls_error.message[n] = '\0';
}

// Finds "threads": N in a JSON object without a JSON parser. Returns false on a malformed or
// out-of-range value; leaves *threads alone when the key is absent.
bool ParseThreads(const char* json, int* threads) {
  const char* key = std::strstr(json, "\"threads\"");
  if (key == nullptr) return true;
  const char* p = key + std::strlen("\"threads\"");
  while (std::isspace(static_cast<unsigned char>(*p))) ++p;
  if (*p++ != ':') return false;
  while (std::isspace(static_cast<unsigned char>(*p))) ++p;
  char* end = nullptr;
  const long value = std::strtol(p, &end, 10);
  if (end == p) return false;
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != ',' && *end != '}' && *end != '\0') return false;
  if (value < 1 || value > 1024) return false;
  *threads = static_cast<int>(value);
  return true;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "cpu" : line.substr(start);
  }
  return "cpu";
}

}  // namespace

Status CpuBackend::Create(const char* config_json, std::unique_ptr<CpuBackend>* out) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (config_json != nullptr && !ParseThreads(config_json, &threads)) {
    return InvalidArgument("create",
                           "config \"threads\" must be an integer in [1, 1024]: ", config_json);
  }
  std::string error;
  const Blas* blas = GetBlas(&error);
  if (blas == nullptr) return Status(STRATA_ERR_INTERNAL, Cat("create: ", error));
  // GEMMs call OpenBLAS from the submitting thread only; give it the same thread budget.
  blas->set_num_threads(threads);
  out->reset(new CpuBackend(threads, blas));
  return Status();
}

CpuBackend::CpuBackend(int threads, const Blas* blas)
    : threads_(threads),
      pool_(threads),
      blas_(blas),
      device_name_(Cat(CpuModelName(), " (", threads, " threads, OpenBLAS ", blas->get_corename(),
                       " kernels)")) {}

void CpuBackend::RecordError(std::string_view prefix, std::string_view message) noexcept {
  StoreThreadError(this, prefix, message);
  std::lock_guard<std::mutex> lock(error_mu_);
  try {
    error_.assign(tls_error.message);
  } catch (...) {  // out of memory: other threads keep seeing the previous message
  }
}

const char* CpuBackend::LastError() {
  if (tls_error.owner != this) {
    std::lock_guard<std::mutex> lock(error_mu_);
    StoreThreadError(this, error_, {});
  }
  return tls_error.message;
}

void CpuBackend::RecordDetachedError(std::string_view prefix, std::string_view message) noexcept {
  StoreThreadError(nullptr, prefix, message);
}

const char* CpuBackend::DetachedLastError() {
  return tls_error.owner == nullptr ? tls_error.message : "";
}

uint64_t TotalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * page_size : 0;
}

uint64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      return std::strtoull(line.c_str() + std::strlen("MemAvailable:"), nullptr, 10) * 1024;
    }
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * page_size : 0;
}

}  // namespace strata::cpu
