#include "strata/common/registry.h"

#include <functional>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Shape {
  virtual ~Shape() = default;
  virtual int sides() const = 0;
};
struct Polygon final : Shape {
  explicit Polygon(int n) : n(n) {}
  int sides() const override { return n; }
  int n;
};

using ShapeFactory = std::function<std::unique_ptr<Shape>(int scale)>;
using CheckedFactory = std::function<absl::StatusOr<std::unique_ptr<Shape>>(int scale)>;

TEST(RegistryTest, RegistersCreatesAndListsByName) {
  FactoryRegistry<ShapeFactory> r("shape");
  ASSERT_TRUE(r.Register("triangle", [](int s) { return std::make_unique<Polygon>(3 * s); }).ok());
  ASSERT_TRUE(r.Register("square", [](int s) { return std::make_unique<Polygon>(4 * s); }).ok());
  EXPECT_THAT(r.Names(), ElementsAre("square", "triangle"));  // sorted
  absl::StatusOr<std::unique_ptr<Shape>> sq = r.Create("square", 2);
  ASSERT_TRUE(sq.ok());
  EXPECT_EQ((*sq)->sides(), 8);
  ASSERT_TRUE(r.Find("triangle").ok());
}

TEST(RegistryTest, UnknownNameIsInvalidArgumentNamingTheKnownOnes) {
  FactoryRegistry<ShapeFactory> r("shape");
  ASSERT_TRUE(r.Register("square", [](int) { return std::make_unique<Polygon>(4); }).ok());
  ASSERT_TRUE(r.Register("hexagon", [](int) { return std::make_unique<Polygon>(6); }).ok());
  auto bad = r.Create("circle", 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown shape \"circle\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("hexagon, square"));
}

TEST(RegistryTest, RegisterRefusesATakenNameAndRegisterOrReplaceReplaces) {
  FactoryRegistry<ShapeFactory> r("shape");
  ASSERT_TRUE(r.Register("n", [](int) { return std::make_unique<Polygon>(3); }).ok());
  EXPECT_EQ(r.Register("n", [](int) { return std::make_unique<Polygon>(5); }).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ((*r.Create("n", 1))->sides(), 3);
  EXPECT_FALSE(r.RegisterOrReplace("n", [](int) { return std::make_unique<Polygon>(5); }));
  EXPECT_EQ((*r.Create("n", 1))->sides(), 5);
  EXPECT_TRUE(r.RegisterOrReplace("m", [](int) { return std::make_unique<Polygon>(7); }));
  EXPECT_THAT(r.Names(), ElementsAre("m", "n"));
}

TEST(RegistryTest, AnEmptyFactoryCountsAsUnknown) {
  FactoryRegistry<ShapeFactory> r("shape");
  ASSERT_TRUE(r.Register("none", nullptr).ok());
  EXPECT_EQ(r.Create("none", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, AStatusOrFactoryPassesItsErrorThrough) {
  FactoryRegistry<CheckedFactory> r("shape");
  ASSERT_TRUE(r.Register("positive", [](int s) -> absl::StatusOr<std::unique_ptr<Shape>> {
                 if (s <= 0) return absl::OutOfRangeError("scale");
                 return std::make_unique<Polygon>(s);
               }).ok());
  // The factory's StatusOr is the answer, not wrapped in another.
  absl::StatusOr<std::unique_ptr<Shape>> ok = r.Create("positive", 4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->sides(), 4);
  EXPECT_EQ(r.Create("positive", 0).status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace strata
