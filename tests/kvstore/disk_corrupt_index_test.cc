// G3 disk tier with a damaged index or data file on a real directory: whatever is wrong with
// the cache's content, Create succeeds (with the intact blocks, or empty with the index moved
// aside) and the tier keeps serving; settings that are wrong still fail Create.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "disk_tier_internal.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "strata/kvstore/disk_tier.h"

namespace strata::kvstore {
namespace {

namespace fs = std::filesystem;
using ::strata::kvstore::testing::MakeBlock;

constexpr size_t kBlock = 16 << 10;
constexpr int64_t kCapacity = 8;
constexpr BlockHash kStored[] = {1, 2, 3, 4};

class DiskCorruptIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("strata_disk_corrupt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  DiskTierOptions Options() const {
    DiskTierOptions o;
    o.path = dir_.string();
    o.block_bytes = kBlock;
    o.capacity_bytes = kCapacity * static_cast<int64_t>(kBlock);
    return o;
  }
  fs::path IndexDir() const { return dir_ / disk_internal::kIndexDirName; }

  // Stores kStored and flushes, so the index has a MANIFEST and one table file.
  void Populate() {
    auto tier = DiskTier::Create(Options());
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (BlockHash h : kStored) {
      const std::vector<std::byte> b = MakeBlock(h, kBlock);
      ASSERT_TRUE((*tier)->Put({h, kRootBlockHash}, b).ok());
    }
    ASSERT_TRUE((*tier)->Flush().ok());
  }

  // The index's files whose names start with `prefix` or end with `suffix`.
  std::vector<fs::path> IndexFiles(const std::string& prefix, const std::string& suffix) const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(IndexDir())) {
      const std::string name = e.path().filename().string();
      if ((!prefix.empty() && name.rfind(prefix, 0) == 0) ||
          (!suffix.empty() && name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)) {
        out.push_back(e.path());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path CurrentManifest() const {
    std::ifstream f(IndexDir() / "CURRENT");
    std::string name;
    std::getline(f, name);
    return IndexDir() / name;
  }
  int CorruptDirs() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind("index.corrupt-", 0) == 0) ++n;
    }
    return n;
  }

  static void WriteFile(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static void Truncate(const fs::path& p, uintmax_t bytes) { fs::resize_file(p, bytes); }
  static void Zero(const fs::path& p) { WriteFile(p, std::string(fs::file_size(p), '\0')); }

  // Reopens the damaged store: it must open, hold either every stored block (intact) or none
  // (reset), store and serve a new block, and keep it across another reopen.
  void ExpectRecovers(bool want_reset) {
    {
      auto opened = DiskTier::Create(Options());
      ASSERT_TRUE(opened.ok()) << opened.status();
      DiskTier& tier = **opened;
      const DiskTier::IndexRecovery r = tier.index_recovery();
      EXPECT_EQ(r.resets, want_reset ? 1 : 0);
      EXPECT_EQ(tier.stats().index_resets, r.resets);  // what the metric exports
      EXPECT_EQ(CorruptDirs(), want_reset ? 1 : 0);
      EXPECT_EQ(tier.usage().blocks, want_reset ? 0 : static_cast<int64_t>(std::size(kStored)));
      for (BlockHash h : kStored) {
        EXPECT_EQ(tier.Contains(h), !want_reset) << h;
        if (!want_reset) ExpectBlock(tier, h);
      }
      ExpectServes(tier, 100);
    }
    auto again = DiskTier::Create(Options());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)->index_recovery().resets, 0);
    ExpectBlock(**again, 100);
    ExpectServes(**again, 101);
  }
  static void ExpectBlock(Tier& tier, BlockHash hash) {
    std::vector<std::byte> got(kBlock);
    absl::Status s = tier.Get(hash, got);
    ASSERT_TRUE(s.ok()) << hash << ": " << s;
    EXPECT_TRUE(got == MakeBlock(hash, kBlock)) << hash;
  }
  static void ExpectServes(Tier& tier, BlockHash hash) {
    const std::vector<std::byte> b = MakeBlock(hash, kBlock);
    absl::Status s = tier.Put({hash, kRootBlockHash}, b);
    ASSERT_TRUE(s.ok()) << s;
    ExpectBlock(tier, hash);
  }

  fs::path dir_;
};

TEST_F(DiskCorruptIndexTest, GarbageCurrentFileStartsEmpty) {
  Populate();
  WriteFile(IndexDir() / "CURRENT", "garbage\n");
  ExpectRecovers(/*want_reset=*/true);
}

TEST_F(DiskCorruptIndexTest, CurrentNamingADeletedManifestStartsEmpty) {
  Populate();
  ASSERT_TRUE(fs::remove(CurrentManifest()));
  ExpectRecovers(/*want_reset=*/true);
}

TEST_F(DiskCorruptIndexTest, ZeroedManifestStartsEmpty) {
  Populate();
  Zero(CurrentManifest());
  ExpectRecovers(/*want_reset=*/true);
}

TEST_F(DiskCorruptIndexTest, EmptiedManifestStartsEmpty) {
  Populate();
  Truncate(CurrentManifest(), 0);
  ExpectRecovers(/*want_reset=*/true);
}

TEST_F(DiskCorruptIndexTest, ZeroedTableFileStartsEmpty) {
  Populate();
  const std::vector<fs::path> tables = IndexFiles("", ".sst");
  ASSERT_FALSE(tables.empty());
  for (const fs::path& t : tables) Zero(t);
  ExpectRecovers(/*want_reset=*/true);
}

TEST_F(DiskCorruptIndexTest, DeletedTableFileStartsEmpty) {
  Populate();
  const std::vector<fs::path> tables = IndexFiles("", ".sst");
  ASSERT_FALSE(tables.empty());
  for (const fs::path& t : tables) ASSERT_TRUE(fs::remove(t));
  ExpectRecovers(/*want_reset=*/true);
}

// A write torn at a chosen byte: the table file or the MANIFEST cut short. Whatever RocksDB
// makes of it, the tier opens, intact or empty (reset, or a MANIFEST whose torn tail lost the
// table's record), and serves.
TEST_F(DiskCorruptIndexTest, TornTableOrManifestAtEveryCutOpens) {
  for (const bool manifest : {false, true}) {
    for (const double fraction : {0.0, 0.1, 0.5, 0.9, 0.999}) {
      SCOPED_TRACE(::testing::Message()
                   << (manifest ? "MANIFEST" : "table") << " cut at " << fraction);
      fs::remove_all(dir_);
      Populate();
      const std::vector<fs::path> tables = IndexFiles("", ".sst");
      ASSERT_FALSE(tables.empty());
      const fs::path victim = manifest ? CurrentManifest() : tables.front();
      const uintmax_t size = fs::file_size(victim);
      Truncate(victim, static_cast<uintmax_t>(static_cast<double>(size) * fraction));
      auto opened = DiskTier::Create(Options());
      ASSERT_TRUE(opened.ok()) << opened.status();
      const int64_t held = (*opened)->usage().blocks;
      const bool reset = (*opened)->index_recovery().resets == 1;
      EXPECT_TRUE(held == 0 || (!reset && held == static_cast<int64_t>(std::size(kStored))))
          << held;
      for (BlockHash h : kStored) {
        if ((*opened)->Contains(h)) ExpectBlock(**opened, h);
      }
      ExpectServes(**opened, 100);
    }
  }
}

TEST_F(DiskCorruptIndexTest, IndexThatIsAFileStartsEmpty) {
  Populate();
  fs::remove_all(IndexDir());
  WriteFile(IndexDir(), "not a directory");
  ExpectRecovers(/*want_reset=*/true);
}

TEST_F(DiskCorruptIndexTest, UnreadableIndexDirectoryStartsEmpty) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any directory";
  Populate();
  fs::permissions(IndexDir(), fs::perms::none);
  ExpectRecovers(/*want_reset=*/true);
}

// Malformed entries are dropped one by one and counted; the rest of the index is kept.
TEST_F(DiskCorruptIndexTest, MalformedIndexEntriesAreDropped) {
  Populate();
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options o(disk_internal::MakeIndexDbOptions(Options()),
                       disk_internal::MakeIndexFamilyOptions());
    ASSERT_TRUE(rocksdb::DB::Open(o, IndexDir().string(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const disk_internal::Key two = disk_internal::EncodeKey(2);
    ASSERT_TRUE(db->Put({}, rocksdb::Slice(two.data(), two.size()), "short").ok());
    ASSERT_TRUE(db->Put({}, "bad-key", std::string(disk_internal::kIndexRecordBytes, 'x')).ok());
    disk_internal::IndexRecord far;
    far.slot = 1 << 30;  // beyond the data file
    far.length = kBlock;
    far.sequence = 99;
    const disk_internal::Key nine = disk_internal::EncodeKey(9);
    const auto value = disk_internal::EncodeIndexRecord(far);
    ASSERT_TRUE(db->Put({}, rocksdb::Slice(nine.data(), nine.size()),
                        rocksdb::Slice(value.data(), value.size()))
                    .ok());
    ASSERT_TRUE(db->Close().ok());
  }
  {
    auto opened = DiskTier::Create(Options());
    ASSERT_TRUE(opened.ok()) << opened.status();
    DiskTier& tier = **opened;
    EXPECT_EQ(tier.index_recovery().resets, 0);
    EXPECT_EQ(tier.index_recovery().dropped_entries, 3);
    EXPECT_EQ(tier.stats().index_dropped_entries, 3);
    EXPECT_FALSE(tier.Contains(2));
    EXPECT_FALSE(tier.Contains(9));
    for (BlockHash h : {1, 3, 4}) ExpectBlock(tier, h);
    ExpectServes(tier, 100);
  }
  auto again = DiskTier::Create(Options());  // the drops were written back
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->index_recovery().dropped_entries, 0);
  for (BlockHash h : {1, 3, 4, 100}) ExpectBlock(**again, h);
}

// The data file has no header: random bytes over its start damage the first slot's block,
// which fails its checksum (a DataLoss miss), never the others or the tier.
TEST_F(DiskCorruptIndexTest, RandomBytesOverTheDataFileStartCostOneBlock) {
  Populate();
  {
    std::fstream f(dir_ / disk_internal::kDataFileName,
                   std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f);
    std::mt19937_64 rng(7);
    std::string junk(disk_internal::kIoAlign, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    ASSERT_TRUE(f.flush());
  }
  auto opened = DiskTier::Create(Options());
  ASSERT_TRUE(opened.ok()) << opened.status();
  DiskTier& tier = **opened;
  EXPECT_EQ(tier.index_recovery().resets, 0);
  int lost = 0;
  for (BlockHash h : kStored) {
    std::vector<std::byte> got(kBlock);
    absl::Status s = tier.Get(h, got);
    if (s.ok()) {
      EXPECT_TRUE(got == MakeBlock(h, kBlock)) << h;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      ++lost;
    }
  }
  EXPECT_EQ(lost, 1);
  EXPECT_EQ(tier.stats().checksum_failures, 1);
  ExpectServes(tier, 100);
}

TEST_F(DiskCorruptIndexTest, OnlyTheNewestMovedAsideIndexesAreKept) {
  Populate();
  for (int i = 0; i < DiskTier::kKeptCorruptIndexes + 3; ++i) {
    WriteFile(IndexDir() / "CURRENT", "garbage\n");
    auto opened = DiskTier::Create(Options());
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ((*opened)->index_recovery().resets, 1);
    ExpectServes(**opened, 100 + i);
  }
  EXPECT_EQ(CorruptDirs(), DiskTier::kKeptCorruptIndexes);
}

// Through a rocksdb::Env (here an in-memory one, which cannot rename a directory): the index
// is deleted instead of moved aside, and the tier starts empty.
TEST_F(DiskCorruptIndexTest, GarbageCurrentThroughAnEnvStartsEmpty) {
  std::unique_ptr<rocksdb::Env> env(rocksdb::NewMemEnv(rocksdb::Env::Default()));
  DiskTierOptions o = Options();
  o.env = env.get();
  {
    auto tier = DiskTier::Create(o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    ExpectServes(**tier, 1);
    ASSERT_TRUE((*tier)->Flush().ok());
  }
  {
    std::unique_ptr<rocksdb::WritableFile> f;
    const std::string current = o.path + "/" + disk_internal::kIndexDirName + "/CURRENT";
    ASSERT_TRUE(env->NewWritableFile(current, &f, rocksdb::EnvOptions()).ok());
    ASSERT_TRUE(f->Append("garbage\n").ok());
    ASSERT_TRUE(f->Close().ok());
  }
  {
    auto tier = DiskTier::Create(o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    EXPECT_EQ((*tier)->index_recovery().resets, 1);
    EXPECT_FALSE((*tier)->Contains(1));
    ExpectServes(**tier, 2);
  }
  auto tier = DiskTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->index_recovery().resets, 0);
  ExpectBlock(**tier, 2);
}

// Wrong settings are not a bad cache: they fail Create, and nothing is moved aside.
TEST_F(DiskCorruptIndexTest, WrongPathsStillFail) {
  fs::create_directories(dir_);
  DiskTierOptions o = Options();
  o.path = (dir_ / "a_file").string();
  WriteFile(o.path, "x");
  EXPECT_FALSE(DiskTier::Create(o).ok());
  o.path = (dir_ / "a_file" / "below").string();
  EXPECT_FALSE(DiskTier::Create(o).ok());
  EXPECT_EQ(CorruptDirs(), 0);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "a_file"));
}

}  // namespace
}  // namespace strata::kvstore
