#include "strata/plugin_common/copy_runs.h"

#include <algorithm>
#include <limits>

namespace strata::plugin_common {
namespace {

// Whether base + offset + bytes stays within the address space.
bool EndFits(const void* base, uint64_t offset, uint64_t bytes) {
  const uint64_t room = std::numeric_limits<uintptr_t>::max() - reinterpret_cast<uintptr_t>(base);
  return offset <= room && bytes <= room - offset;
}

}  // namespace

Status CheckCopyRuns(const char* op, const void* dst, const void* src, const strata_copy_run* runs,
                     int64_t n, CopyRunsSummary* summary) {
  *summary = CopyRunsSummary();
  if (n < 0) return InvalidArgument(op, "n is negative (", n, ")");
  if (n == 0) return Status();
  if (dst == nullptr || src == nullptr || runs == nullptr) {
    return InvalidArgument(op,
                           dst == nullptr   ? "dst"
                           : src == nullptr ? "src"
                                            : "runs",
                           " is NULL with n = ", n);
  }
  CopyRunsSummary s;
  s.dst_begin = std::numeric_limits<uint64_t>::max();
  for (int64_t i = 0; i < n; ++i) {
    const strata_copy_run& r = runs[i];
    if (r.bytes == 0) return InvalidArgument(op, "runs[", i, "] has 0 bytes");
    if (!EndFits(src, r.src_offset, r.bytes) || !EndFits(dst, r.dst_offset, r.bytes)) {
      return InvalidArgument(op, "runs[", i, "] (src_offset ", r.src_offset, ", dst_offset ",
                             r.dst_offset, ", bytes ", r.bytes, ") ends past the address space");
    }
    if (r.bytes > std::numeric_limits<uint64_t>::max() - s.total_bytes) {
      return InvalidArgument(op, "the runs' total bytes overflow 64 bits at runs[", i, "]");
    }
    s.total_bytes += r.bytes;
    s.dst_begin = std::min(s.dst_begin, r.dst_offset);
    s.dst_end = std::max(s.dst_end, r.dst_offset + r.bytes);
  }
  *summary = s;
  return Status();
}

}  // namespace strata::plugin_common
