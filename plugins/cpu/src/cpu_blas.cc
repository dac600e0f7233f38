#include "cpu_blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace strata::cpu {
namespace {

// The kernel family for this CPU, or nullptr to let OpenBLAS decide.
const char* CoreTypeForThisCpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

const Blas* GetBlas(std::string* error) {
  static std::once_flag once;
  static Blas blas;
  static std::string load_error;
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      // Runs once, when the first backend is created, before any BLAS thread exists.
      if (const char* core = CoreTypeForThisCpu()) setenv("OPENBLAS_CORETYPE", core, 0);
    }
    void* lib = nullptr;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
    }
    if (lib == nullptr) {
      const char* why = dlerror();
      load_error = std::string("cannot load OpenBLAS (libopenblas.so.0): ") + (why ? why : "");
      return;
    }
    Blas b;
    if (!Resolve(lib, "cblas_sgemm", &b.sgemm) ||
        !Resolve(lib, "openblas_set_num_threads", &b.set_num_threads) ||
        !Resolve(lib, "openblas_get_corename", &b.get_corename)) {
      load_error =
          "libopenblas.so.0 lacks cblas_sgemm / openblas_set_num_threads / "
          "openblas_get_corename";
      return;
    }
    blas = b;
  });
  if (blas.sgemm == nullptr) {
    if (error != nullptr) *error = load_error;
    return nullptr;
  }
  return &blas;
}

}  // namespace strata::cpu
