// The CUDA plugin's record of what the last ops on a stream wrote (write_history.h), which
// decides whether a GEMM may read its weights before the kernel enqueued just before it is done.
// Host code only: runs without a GPU.
#include <gtest/gtest.h>

#include <cstddef>

#include "write_history.h"

namespace strata::cuda {
namespace {

class WriteHistoryTest : public ::testing::Test {
 protected:
  ByteRange At(size_t offset, size_t bytes) const { return {memory_ + offset, bytes}; }

  std::byte memory_[4096] = {};
  WriteHistory history_;
};

TEST_F(WriteHistoryTest, AnOpThatNamesNothingMayHaveWrittenAnything) {
  history_.BeginOp();  // e.g. a copy, or an op that does not narrow
  history_.BeginOp();  // the current op
  EXPECT_TRUE(history_.WrittenJustBefore(At(0, 16)));
  EXPECT_FALSE(history_.WrittenJustBefore(At(0, 0)));  // an empty range overlaps nothing
}

TEST_F(WriteHistoryTest, TheFirstOpsOnAStreamHaveNoPredecessors) {
  // A fresh history: the slots before the current op hold "anything" (unknown work).
  history_.BeginOp();
  EXPECT_TRUE(history_.WrittenJustBefore(At(0, 16)));
}

TEST_F(WriteHistoryTest, NamedOutputsOfTheTwoOpsBeforeCount) {
  history_.BeginOp();
  history_.Wrote({At(0, 64)});  // op A writes [0, 64)
  history_.BeginOp();
  history_.Wrote({At(128, 64), At(512, 8)});               // op B writes [128, 192) and [512, 520)
  history_.BeginOp();                                      // op C asks
  EXPECT_TRUE(history_.WrittenJustBefore(At(32, 64)));     // overlaps A's output
  EXPECT_TRUE(history_.WrittenJustBefore(At(191, 1)));     // the last byte of B's first range
  EXPECT_TRUE(history_.WrittenJustBefore(At(500, 13)));    // overlaps B's second range
  EXPECT_FALSE(history_.WrittenJustBefore(At(64, 64)));    // between A's and B's outputs
  EXPECT_FALSE(history_.WrittenJustBefore(At(192, 320)));  // between B's ranges
  EXPECT_FALSE(history_.WrittenJustBefore(At(1024, 2048)));
}

TEST_F(WriteHistoryTest, OnlyTheTwoOpsBeforeTheCurrentOneCount) {
  history_.BeginOp();
  history_.Wrote({At(0, 64)});  // A
  history_.BeginOp();
  history_.Wrote({At(128, 64)});  // B
  history_.BeginOp();
  history_.Wrote({At(256, 64)});  // C
  history_.BeginOp();             // D asks: B and C count, A is done
  EXPECT_FALSE(history_.WrittenJustBefore(At(0, 64)));
  EXPECT_TRUE(history_.WrittenJustBefore(At(128, 64)));
  EXPECT_TRUE(history_.WrittenJustBefore(At(256, 64)));
  // What the current op writes is not "before" it.
  history_.Wrote({At(1024, 64)});
  EXPECT_FALSE(history_.WrittenJustBefore(At(1024, 64)));
}

TEST_F(WriteHistoryTest, CallsWithinOneOpAddUpAndTooManyRangesMeanAnything) {
  history_.BeginOp();
  history_.Wrote({At(0, 8)});
  history_.Wrote({At(16, 8)});  // an op that calls another op inside adds its outputs
  history_.BeginOp();
  history_.Wrote({At(2048, 8)});
  history_.BeginOp();
  EXPECT_TRUE(history_.WrittenJustBefore(At(0, 8)));
  EXPECT_TRUE(history_.WrittenJustBefore(At(16, 8)));
  EXPECT_FALSE(history_.WrittenJustBefore(At(8, 8)));

  history_.BeginOp();
  for (size_t i = 0; i <= WriteHistory::kMaxRanges; ++i) history_.Wrote({At(i * 8, 8)});
  history_.Wrote({At(100, 8)});  // past the limit: stays "anything"
  history_.BeginOp();
  EXPECT_TRUE(history_.WrittenJustBefore(At(3000, 8)));
}

}  // namespace
}  // namespace strata::cuda
