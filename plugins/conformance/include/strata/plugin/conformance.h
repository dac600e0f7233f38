#pragma once
// The plugin conformance suite: runs every op of the plugin ABI (strata/plugin/abi.h) on a
// candidate backend and on a reference backend with the same random inputs, and compares the
// outputs with a per-dtype tolerance.
//
// Inputs are generated in fp32 from a fixed seed, rounded once to the coarsest of the two
// backends' dtypes for their role (weights, activations, KV cache, as each backend's
// strata_backend_info says), and uploaded to each backend in its own dtype, so both compute
// on identical values. Outputs are read back as doubles.
//
// Error metric, per compared buffer: the normalized max error
//     max_i |candidate_i - reference_i| / max_i |reference_i|
// and a case's error is the largest over its buffers. Integer outputs (expert ids) must match
// exactly. Buffers are compared whole, row-stride padding and untouched KV blocks included, so
// an op that writes where it must not fails too.
//
// Threading: RunConformance uses each backend's default stream from the calling thread only.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/plugin/plugin.h"

namespace strata {

struct ConformanceOptions {
  uint64_t seed = 0x5eed;
  // ABI op names to run (e.g. "gemm", "attention_decode"); empty runs every op.
  std::vector<std::string> ops;
  // Runs only the cases whose name contains this (e.g. "V=128256"); empty runs every case. A
  // filter that no case of the selected ops matches is an error.
  std::string case_filter;
  // Tolerance on the normalized max error when both backends keep every role in fp32.
  double f32_tolerance = 1e-4;
  // Tolerance when either backend stores any role in bf16 or f16: one bf16 rounding of an
  // output is 2^-9 relative; a kernel that keeps fp32 accumulators stays well under 2e-2.
  double half_tolerance = 2e-2;
};

struct CaseResult {
  std::string op;    // ABI op name
  std::string name;  // shape and variant, e.g. "M=37 N=96 K=200 bias"
  double max_error = 0;
  double tolerance = 0;
  bool passed = false;
  bool skipped = false;  // an optional op (MoE) one of the backends lacks
  // Why the case failed or was skipped: an op's error, a mismatching integer output, or
  // where the worst element is. Empty for passing cases.
  std::string error;
  double candidate_seconds = 0;  // wall time of the candidate's op calls incl. synchronize
};

struct ConformanceReport {
  std::string candidate;  // backend names, from get_info
  std::string reference;
  std::vector<CaseResult> cases;

  int num_passed() const;
  int num_failed() const;
  int num_skipped() const;
  bool all_passed() const { return num_failed() == 0; }
};

// The ABI op names the suite tests, in the order it runs them (the ABI's order): the valid
// values of ConformanceOptions::ops and of `strata plugin-test --op`.
const std::vector<std::string>& ConformanceOps();

// Runs the suite. Per-case failures (wrong results, op errors, a negative case that did not
// return STRATA_ERR_INVALID_ARGUMENT) are in the report; the status is an error only for bad
// options (InvalidArgument: unknown op name). Both backends must outlive the call.
absl::StatusOr<ConformanceReport> RunConformance(Backend& candidate, Backend& reference,
                                                 const ConformanceOptions& options = {});

}  // namespace strata
