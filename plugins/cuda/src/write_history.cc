#include "write_history.h"

namespace strata::cuda {

bool ByteRange::Intersects(const ByteRange& o) const {
  if (bytes == 0 || o.bytes == 0) return false;
  const char* a = static_cast<const char*>(begin);
  const char* b = static_cast<const char*>(o.begin);
  return a < b + o.bytes && b < a + bytes;
}

bool WriteHistory::OpWrites::MayHaveWritten(const ByteRange& r) const {
  if (anything) return r.bytes > 0;
  for (int i = 0; i < count; ++i) {
    if (ranges[i].Intersects(r)) return true;
  }
  return false;
}

void WriteHistory::BeginOp() {
  ops_[2] = ops_[1];
  ops_[1] = ops_[0];
  ops_[0] = OpWrites{};
}

void WriteHistory::Wrote(std::initializer_list<ByteRange> ranges) {
  OpWrites& w = ops_[0];
  if (w.anything && w.count == 0) w.anything = false;  // the op's first narrowing
  if (w.anything) return;                              // already past kMaxRanges
  for (const ByteRange& r : ranges) {
    if (w.count == kMaxRanges) {
      w.anything = true;
      return;
    }
    w.ranges[w.count++] = r;
  }
}

bool WriteHistory::WrittenJustBefore(const ByteRange& r) const {
  return ops_[1].MayHaveWritten(r) || ops_[2].MayHaveWritten(r);
}

}  // namespace strata::cuda
