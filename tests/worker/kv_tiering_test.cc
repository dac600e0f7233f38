// A worker's lower KV tiers with a real engine: prompts evicted from the engine's pool come back
// from G2 (pinned host) and G3 (RocksDB) with identical greedy tokens and fewer computed tokens,
// and every tier's stores reach the heartbeat events.
#include "kv_tiering.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "absl/synchronization/notification.h"
#include "remote_test_util.h"
#include "strata/engine/presets.h"
#include "strata/kvstore/host_tier.h"
#include "strata/kvstore/remote_tier.h"

namespace strata::worker {
namespace {

class KvTieringTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/strata_kv_tiering_test_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama", *dir_ + "/model").ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // An engine with a 12-block pool of 8-token blocks (16 KiB each) and the given tiers.
  void Start(KvTierOptions tiers, std::shared_ptr<const BlockHashKey> key = nullptr) {
    EngineOptions opts;
    opts.kv_hash_key = std::move(key);
    opts.runner.block_size = 8;
    opts.runner.num_kv_blocks = 12;
    auto e = Engine::Create(*dir_ + "/model", opts);
    ASSERT_TRUE(e.ok()) << e.status();
    loop_ = std::make_unique<EngineLoop>(std::move(*e));
    auto t = KvTiering::Build(tiers, "test-worker", loop_.get(), &registry_);
    ASSERT_TRUE(t.ok()) << t.status();
    tiering_ = std::move(*t);
  }
  void TearDown() override {
    if (loop_) loop_->Stop();
    tiering_.reset();
    loop_.reset();
  }

  std::vector<int32_t> Run(const std::string& id, int first, std::string cache_salt = "") {
    std::vector<int32_t> prompt(41);
    for (int i = 0; i < 41; ++i) prompt[i] = first + (i * 7) % 200;
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 6;
    p.ignore_eos = true;
    p.cache_salt = std::move(cache_salt);
    absl::Notification done;
    std::vector<int32_t> tokens;
    loop_->Submit(id, prompt, p, [&](const absl::Status& st, const RequestOutput& o) {
      EXPECT_TRUE(st.ok()) << st;
      tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (!st.ok() || o.finished) done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    return tokens;
  }
  int64_t Computed() {
    // Load is refreshed after each step; the request just finished, so it is current.
    return loop_->load().prompt_tokens_computed;
  }
  int64_t Hits(kvstore::TierKind kind) { return tiering_->store().tier(kind)->stats().hits; }

  static std::string* dir_;
  metrics::Registry registry_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<KvTiering> tiering_;
};
std::string* KvTieringTest::dir_ = nullptr;

TEST_F(KvTieringTest, EvictedPromptComesBackFromTheHostTier) {
  KvTierOptions t;
  t.host_bytes = 1 << 20;  // 64 blocks
  Start(t);
  const auto reference = Run("a", 3);
  for (int s : {50, 90, 130}) Run("evict-" + std::to_string(s), s);
  const int64_t before = Computed();
  EXPECT_EQ(Run("a-again", 3), reference);
  EXPECT_LT(Computed() - before, 16);  // 5 prompt blocks imported; at most the tail computed
  EXPECT_GE(Hits(kvstore::TierKind::kHost), 4);
  EXPECT_GE(tiering_->stats().imported_blocks, 4);
  EXPECT_EQ(tiering_->stats().fetch_failed_blocks, 0);
  bool saw_host_event = false;
  for (const auto& e : tiering_->TakeEvents()) saw_host_event |= e.tier() == 1;
  EXPECT_TRUE(saw_host_event);
  const std::string text = registry_.Serialize();
  EXPECT_NE(text.find("strata_kvstore_hits_total{tier=\"host\"}"), std::string::npos);
  EXPECT_NE(text.find("strata_worker_kv_stage_total{outcome=\"fetch\"}"), std::string::npos);
}

TEST_F(KvTieringTest, EvictedSaltedPromptComesBackOnlyForTheSameSalt) {
  KvTierOptions t;
  t.host_bytes = 1 << 20;  // 64 blocks
  auto key = BlockHashKey::FromBytes("a key for this worker's block hashes");
  ASSERT_TRUE(key.ok()) << key.status();
  Start(t, *key);
  const auto reference = Run("a", 3, "tenant-a");
  for (int s : {50, 90, 130}) Run("evict-" + std::to_string(s), s);
  // Another salt (and no salt) finds nothing in G2 and computes the whole prompt.
  const int64_t hits = Hits(kvstore::TierKind::kHost);
  int64_t before = Computed();
  EXPECT_EQ(Run("b", 3, "tenant-b"), reference);
  EXPECT_GE(Computed() - before, 41);
  before = Computed();
  EXPECT_EQ(Run("plain", 3), reference);
  EXPECT_GE(Computed() - before, 41);
  EXPECT_EQ(Hits(kvstore::TierKind::kHost), hits);
  for (int s : {50, 90, 130}) Run("evict-again-" + std::to_string(s), s);
  // The same salt fetches its blocks back from G2.
  before = Computed();
  EXPECT_EQ(Run("a-again", 3, "tenant-a"), reference);
  EXPECT_LT(Computed() - before, 16);
  EXPECT_GE(Hits(kvstore::TierKind::kHost), hits + 4);
}

TEST_F(KvTieringTest, PromptDemotedToDiskIsFetchedBackAndResyncListsIt) {
  KvTierOptions t;
  t.host_bytes = 8 * 16384;  // eight blocks: older prompts are demoted to disk
  t.disk_path = *dir_ + "/disk-" + std::to_string(::getpid());
  t.disk_bytes = 8 << 20;
  t.disk_admit_uses = 1;
  Start(t);
  const auto reference = Run("a", 3);
  for (int s : {50, 90, 130, 170}) Run("evict-" + std::to_string(s), s);
  tiering_->store().Flush();
  const int64_t before = Computed();
  EXPECT_EQ(Run("a-again", 3), reference);
  // At most half of G2 (4 blocks) is fetched in one run: 32 of 41 tokens come from disk.
  EXPECT_LE(Computed() - before, 41 - 32);
  EXPECT_GE(Hits(kvstore::TierKind::kDisk), 4);
  tiering_->Resync();
  int disk_blocks = 0;
  for (const auto& e : tiering_->TakeEvents()) disk_blocks += e.tier() == 2;
  EXPECT_GE(disk_blocks, 5);
}

TEST_F(KvTieringTest, MismatchedBlockSizeIsRejected) {
  EngineOptions opts;
  opts.runner.block_size = 8;
  opts.runner.num_kv_blocks = 12;
  auto e = Engine::Create(*dir_ + "/model", opts);
  ASSERT_TRUE(e.ok());
  loop_ = std::make_unique<EngineLoop>(std::move(*e));
  kvstore::HostTierOptions ho;
  ho.block_bytes = 1000;
  ho.capacity_bytes = 1 << 20;
  auto host = kvstore::HostTier::Create(ho);
  ASSERT_TRUE(host.ok());
  auto store = kvstore::TieredStore::Create({}, std::move(*host), nullptr, nullptr);
  ASSERT_TRUE(store.ok());
  auto t = KvTiering::Create({}, std::move(*store), loop_.get(), nullptr);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KvTieringTest, RemoteDaemonsFromTheRouterFollowItsList) {
  KvTierOptions t;
  t.host_bytes = 1 << 20;
  t.remote_from_router = true;
  t.remote_grace = absl::ZeroDuration();
  Start(t);
  ASSERT_TRUE(tiering_->discovers_kvstores());
  auto* remote =
      dynamic_cast<kvstore::RemoteTier*>(tiering_->store().tier(kvstore::TierKind::kRemote));
  ASSERT_NE(remote, nullptr) << "G4 exists before the router names a daemon";
  EXPECT_TRUE(remote->daemons().empty());
  auto server = kvstore::testing::StartTestServer("kvs-discovered", 64 * 16384, 16384);
  ASSERT_NE(server, nullptr);
  // Applied on the tiering's own thread: the caller (the registry client) does not wait.
  tiering_->OnKvstoresListed({server->address()});
  ASSERT_TRUE(kvstore::testing::WaitFor([&] { return tiering_->membership_changes_applied() == 1; },
                                        absl::Seconds(10)));
  EXPECT_EQ(remote->daemons(), std::vector<std::string>{server->address()});
  EXPECT_EQ(remote->connected_daemons(), 1);
  const std::string text = registry_.Serialize();
  EXPECT_NE(text.find("strata_worker_kv_remote_daemons{state=\"known\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("strata_worker_kv_remote_daemons{state=\"connected\"} 1"), std::string::npos);
  tiering_->OnKvstoresListed({});
  ASSERT_TRUE(kvstore::testing::WaitFor([&] { return tiering_->membership_changes_applied() == 2; },
                                        absl::Seconds(10)));
  EXPECT_TRUE(remote->daemons().empty());
  // Listing a daemon that does not answer returns at once (its Hello waits on the applier).
  const absl::Time before = absl::Now();
  tiering_->OnKvstoresListed({"10.255.255.1:7400"});
  EXPECT_LT(absl::Now() - before, absl::Milliseconds(500));

  // A worker with a fixed list never follows the router.
  TearDown();
  KvTierOptions fixed;
  fixed.host_bytes = 1 << 20;
  fixed.remote = {server->address()};
  Start(fixed);
  EXPECT_FALSE(tiering_->discovers_kvstores());
  tiering_->OnKvstoresListed({});
  EXPECT_EQ(dynamic_cast<kvstore::RemoteTier*>(tiering_->store().tier(kvstore::TierKind::kRemote))
                ->daemons(),
            std::vector<std::string>{server->address()});
}

TEST(KvTieringBuildTest, AListAndTheRouterExcludeEachOther) {
  KvTierOptions t;
  t.host_bytes = 1 << 20;
  t.remote = {"127.0.0.1:1"};
  t.remote_from_router = true;
  EngineOptions opts;
  opts.runner.block_size = 8;
  opts.runner.num_kv_blocks = 12;
  const std::string dir = ::testing::TempDir() + "/strata_kv_build_" + std::to_string(::getpid());
  ASSERT_TRUE(WritePreset("tiny-llama", dir).ok());
  auto e = Engine::Create(dir, opts);
  ASSERT_TRUE(e.ok()) << e.status();
  EngineLoop loop(std::move(*e));
  auto built = KvTiering::Build(t, "w", &loop, nullptr);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  loop.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::worker
