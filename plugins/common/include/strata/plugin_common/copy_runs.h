#pragma once
// The argument check of abi.h copy_runs, the same in every in-tree plugin: what a plugin may
// verify about a run list without touching the memory it names. Whether dst and src are memory
// the plugin can reach, and that the destination ranges overlap nothing, is the plugin's (or,
// where it cannot tell, the host's) business.
#include <cstdint>

#include "strata/plugin/abi.h"
#include "strata/plugin_common/status.h"

namespace strata::plugin_common {

// What the runs span, from the check.
struct CopyRunsSummary {
  uint64_t total_bytes = 0;  // sum of the runs' bytes
  uint64_t dst_begin = 0;    // lowest destination offset
  uint64_t dst_end = 0;      // one past the highest destination byte
};

// INVALID_ARGUMENT (naming `op` and the first bad run) for n < 0; dst, src or runs NULL while
// n > 0; a run of 0 bytes; a run whose end (base + offset + bytes) is past the address space.
// n == 0 is valid with any pointers (the summary is all zeros).
Status CheckCopyRuns(const char* op, const void* dst, const void* src, const strata_copy_run* runs,
                     int64_t n, CopyRunsSummary* summary);

}  // namespace strata::plugin_common
