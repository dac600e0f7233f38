#pragma once
// OpenBLAS, loaded on first use with dlopen rather than linked, so that its choice of CPU
// kernels can be steered first. OpenBLAS (0.3.21 in Debian 12) reads OPENBLAS_CORETYPE only
// while it loads, and on CPUs it does not recognise - common in VMs, which report a generic
// model - it falls back to SSE3 "Prescott" kernels, about 9x slower for sgemm than the AVX-512
// ones on the same machine. When the variable is unset we set it from cpuid before loading.
#include <cblas.h>

#include <string>

namespace strata::cpu {

struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_corename) get_corename = nullptr;
};

// The process-wide OpenBLAS; nullptr (and *error set) if it cannot be loaded. Thread-safe.
const Blas* GetBlas(std::string* error);

}  // namespace strata::cpu
