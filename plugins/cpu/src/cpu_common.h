#pragma once
// The plugin-side helpers this plugin shares with the other in-tree plugins
// (plugins/common: Status, descriptor validation, op argument checks), named in strata::cpu.
// The CPU plugin computes and stores everything in F32.
#include "strata/plugin_common/op_args.h"
#include "strata/plugin_common/status.h"
#include "strata/plugin_common/tensor.h"

namespace strata::cpu {

using plugin_common::CacheView;
using plugin_common::Cat;
using plugin_common::CheckIndices;
using plugin_common::InvalidArgument;
using plugin_common::Status;
using plugin_common::TensorView;

// The dtype of every float tensor and of the KV pool.
inline constexpr strata_dtype kFloatDtype = STRATA_DTYPE_F32;

}  // namespace strata::cpu
