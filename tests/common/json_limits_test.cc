// The pre-parse nesting bound on outside JSON.
#include "strata/common/json_limits.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

std::string Arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonDepthTest, CountsArraysAndObjectsUpToTheLimit) {
  EXPECT_TRUE(CheckJsonDepth("", 1).ok());
  EXPECT_TRUE(CheckJsonDepth("42", 0).ok());
  EXPECT_TRUE(CheckJsonDepth(Arrays(3), 3).ok());
  EXPECT_TRUE(CheckJsonDepth(R"({"a":[{"b":[]}]})", 4).ok());
  const absl::Status s = CheckJsonDepth(R"({"a":[{"b":[]}]})", 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("nested deeper than 3 levels"));
  EXPECT_FALSE(CheckJsonDepth(Arrays(kMaxJsonDepth + 1)).ok());
  EXPECT_TRUE(CheckJsonDepth(Arrays(kMaxJsonDepth)).ok());
}

TEST(JsonDepthTest, SiblingsDoNotAddUp) {
  std::string text = "[";
  for (int i = 0; i < 1000; ++i) text += (i ? "," : "") + Arrays(5);
  text += "]";
  EXPECT_TRUE(CheckJsonDepth(text, 6).ok());
  EXPECT_FALSE(CheckJsonDepth(text, 5).ok());
}

TEST(JsonDepthTest, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(CheckJsonDepth(R"(["[[[[{{{{"])", 1).ok());
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_TRUE(CheckJsonDepth(R"(["\"[[[["])", 1).ok());
  EXPECT_FALSE(CheckJsonDepth(R"(["\\",[[]]])", 2).ok());
}

TEST(JsonDepthTest, AMillionLevelsAreRefusedWithoutRecursion) {
  EXPECT_FALSE(CheckJsonDepth(std::string(1 << 20, '{')).ok());
  // Unbalanced closers never make the depth negative.
  EXPECT_TRUE(CheckJsonDepth(std::string(1000, ']') + "[[]]", 2).ok());
}

}  // namespace
}  // namespace strata
