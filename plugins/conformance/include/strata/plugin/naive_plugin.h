#pragma once
// The naive reference plugin: a plain strata_plugin_api_v1 table built into the host, whose
// ops are the ABI's formulas written as simple loops accumulating in double. It is slow and
// obviously correct, and it is independent of the CPU plugin, so the conformance suite can
// check the CPU plugin against it.
//
// "Device" memory is host memory. Ops run synchronously on the calling thread; streams are
// tokens. The backend's dtypes come from its config: NULL or {} gives fp32 for every role,
// {"dtype":"bf16"} or {"dtype":"f16"} makes it report (and expect) that dtype for weights,
// activations and the KV cache; ops read any float dtype and compute in double either way.
#include <memory>

#include "absl/status/statusor.h"
#include "strata/plugin/abi.h"
#include "strata/plugin/plugin.h"

namespace strata {

// The static table (MoE entries included). Tests may copy it and replace entries.
const strata_plugin_api_v1* NaivePluginApi();

// The table wrapped as a Plugin whose origin is "naive".
absl::StatusOr<std::shared_ptr<Plugin>> NaivePlugin();

}  // namespace strata
