#include "strata/common/memory_limit.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(ReadResidentBytes, GrowsWithTouchedMemoryAndFallsWhenItIsUnmapped) {
  auto before = ReadResidentBytes();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GT(*before, 0);
  const size_t size = 64 * kMiB;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, size);
  auto during = ReadResidentBytes();
  ASSERT_TRUE(during.ok());
  EXPECT_GE(*during - *before, 60 * kMiB);
  munmap(p, size);
  auto after = ReadResidentBytes();
  ASSERT_TRUE(after.ok());
  EXPECT_LE(*after, *during - 60 * kMiB);
}

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per process: ctest runs the cases of this suite in parallel.
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("cgroup_root_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "pod" / "app");
  }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ / rel) << text;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::filesystem::path root_;
};

TEST_F(CgroupTest, ReadsTheV2LimitOfTheProcessCgroup) {
  Write("pod/app/memory.max", "1073741824\n");
  EXPECT_EQ(CgroupMemoryMax("0::/pod/app\n", root_), int64_t{1} << 30);
  // v1 lines are skipped; the v2 line counts wherever it is.
  EXPECT_EQ(CgroupMemoryMax("4:memory:/x\n0::/pod/app\n", root_), int64_t{1} << 30);
}

TEST_F(CgroupTest, NoLimitWhenUnlimitedMissingOrNotV2) {
  Write("pod/app/memory.max", "max\n");
  EXPECT_EQ(CgroupMemoryMax("0::/pod/app\n", root_), std::nullopt);
  EXPECT_EQ(CgroupMemoryMax("0::/pod\n", root_), std::nullopt);  // no memory.max there
  EXPECT_EQ(CgroupMemoryMax("4:memory:/pod/app\n", root_), std::nullopt);
  EXPECT_EQ(CgroupMemoryMax("", root_), std::nullopt);
  Write("memory.max", "5000000000\n");
  EXPECT_EQ(CgroupMemoryMax("0::/../memory.max\n", root_ / "pod"), std::nullopt);
  EXPECT_EQ(CgroupMemoryMax("0::/\n", root_), 5000000000);
}

TEST(ResolveMemoryLimit, FlagOrCgroupLessHeadroom) {
  EXPECT_EQ(*ResolveMemoryLimit(512, std::nullopt), 512 * kMiB);
  EXPECT_EQ(*ResolveMemoryLimit(512, 100 * kMiB), 512 * kMiB);  // a given limit wins
  EXPECT_EQ(*ResolveMemoryLimit(0, 8192 * kMiB), 0);
  EXPECT_EQ(*ResolveMemoryLimit(-1, std::nullopt), 0);
  EXPECT_EQ(*ResolveMemoryLimit(-1, 10240 * kMiB), 9216 * kMiB);  // a tenth
  EXPECT_EQ(*ResolveMemoryLimit(-1, 256 * kMiB), 192 * kMiB);     // at least 64 MiB
  EXPECT_EQ(*ResolveMemoryLimit(-1, 32 * kMiB), 0);               // too small to keep any
  EXPECT_FALSE(ResolveMemoryLimit(-2, std::nullopt).ok());
  EXPECT_FALSE(ResolveMemoryLimit(int64_t{1} << 40, std::nullopt).ok());
}

TEST(MemoryWatch, FollowsItsReaderAndTheLimit) {
  std::atomic<int64_t> reading{100};
  MemoryWatch watch(150, absl::Milliseconds(1), [&]() -> absl::StatusOr<int64_t> {
    const int64_t v = reading.load();
    if (v < 0) return absl::InternalError("unreadable");
    return v;
  });
  EXPECT_FALSE(watch.over_limit());
  EXPECT_EQ(watch.resident_bytes(), 100);
  auto wait_for = [&](bool over) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (watch.over_limit() != over && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    return watch.over_limit() == over;
  };
  reading = 200;
  EXPECT_TRUE(wait_for(true));
  reading = -1;  // a failed reading keeps the last value
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(watch.over_limit());
  EXPECT_EQ(watch.resident_bytes(), 200);
  watch.set_limit_bytes(250);  // raised: under at once
  EXPECT_FALSE(watch.over_limit());
  watch.set_limit_bytes(150);
  EXPECT_TRUE(watch.over_limit());
  reading = 120;
  EXPECT_TRUE(wait_for(false));
}

}  // namespace
}  // namespace strata
