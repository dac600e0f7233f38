#pragma once
// Stream-order bookkeeping for kernels that read some of their inputs before the kernel enqueued
// just before them is done (programmatic dependent launch; the GEMMs' early_weights). Host code
// only, no CUDA: tested without a GPU (tests/plugins/cuda_write_history_test.cc).
//
// A kernel launched with programmatic dependent launch may start once its predecessor has
// passed its own wait (every kernel of this plugin waits before it lets dependents start), i.e.
// while the op before the current one may still run; a library kernel (cuBLAS) may let it start
// earlier still, so the two ops before the current one count. Every entry of the plugin calls
// BeginOp first, which marks the current op as writing anything; an op narrows that to what it
// names in Wrote (before it enqueues its kernels). Ops on one stream never run concurrently
// (abi.h), so nothing here needs a lock.
#include <array>
#include <cstddef>
#include <initializer_list>

#include "strata/plugin_common/tensor.h"

namespace strata::cuda {

// Device bytes [begin, begin + bytes).
struct ByteRange {
  const void* begin = nullptr;
  size_t bytes = 0;

  static ByteRange Of(const plugin_common::TensorView& v) {
    return {v.data, static_cast<size_t>(v.span_bytes())};
  }
  bool Intersects(const ByteRange& o) const;
};

class WriteHistory {
 public:
  // A new op starts; until it calls Wrote it may write anything.
  void BeginOp();
  // The current op writes (at most) these ranges; several calls add up. More than kMaxRanges
  // ranges in one op count as anything again.
  void Wrote(std::initializer_list<ByteRange> ranges);
  // Whether one of the two ops before the current one may have written (part of) r.
  bool WrittenJustBefore(const ByteRange& r) const;

  static constexpr int kMaxRanges = 4;

 private:
  struct OpWrites {
    bool anything = true;
    int count = 0;
    std::array<ByteRange, kMaxRanges> ranges{};

    bool MayHaveWritten(const ByteRange& r) const;
  };
  std::array<OpWrites, 3> ops_{};  // the current op, the one before, the one before that
};

}  // namespace strata::cuda
