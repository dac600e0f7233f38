// A kvstore daemon registers with a router's registry (a real WorkerPool behind a real gRPC
// Registry service, in process) as ROLE_KVSTORE; the blocks clients store into it, and the ones
// they erase, reach the router's KV index at tier 3 (remote) through its heartbeats; it is never
// a placement candidate. The registry names it to workers that follow the router.
#include <gtest/gtest.h>

#include "grpcpp/grpcpp.h"
#include "remote_test_util.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/kvstore/remote_tier.h"
#include "strata/proto/protocol.h"
#include "strata/proto/registry_client.h"
#include "strata/router/placement.h"
#include "strata/router/registry_service.h"
#include "strata/router/worker_pool.h"

namespace strata::kvstore {
namespace {

using testing::ClientOptions;
using testing::MakeBlock;
using testing::WaitFor;

constexpr size_t kBlock = 32 << 10;

// How long a prefix of `chain` the index says `worker` holds in `tier`.
int HeldInTier(const router::WorkerPool& pool, const std::string& worker,
               std::span<const BlockHash> chain, router::Tier tier) {
  router::WorkerId id = 0;
  for (const auto& w : pool.Snapshot()) {
    if (w.id == worker) id = w.index_id;
  }
  for (const auto& m : pool.MatchPrefix(chain)) {
    if (m.worker == id) return m.tier_blocks[static_cast<int>(tier)];
  }
  return 0;
}

TEST(RemoteRouterTest, DaemonEventsReachTheKvIndexAtTierThree) {
  router::WorkerPool pool(absl::Seconds(30));
  router::RegistryService service(&pool, nullptr);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto registry = builder.BuildAndStart();
  ASSERT_GT(port, 0);

  KvStoreServerOptions o;
  o.id = "kvs-router";
  o.capacity_bytes = 16 * kBlock;
  o.block_bytes = kBlock;
  o.http_port = -1;
  o.router_address = "127.0.0.1:" + std::to_string(port);
  o.heartbeat_interval = absl::Milliseconds(50);
  auto server = KvStoreServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return (*server)->registered(); }, absl::Seconds(10)));
  auto snapshot = pool.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].role, router::WorkerRole::kKvstore);
  EXPECT_EQ(snapshot[0].grpc_address, (*server)->address());
  // Never a placement candidate: with only a kvstore registered there is no decode worker.
  auto placer = router::Placer::Create({});
  ASSERT_TRUE(placer.ok());
  EXPECT_TRUE(absl::IsUnavailable((*placer)->Place(snapshot, {}, 64, 16, {}).status()));
  EXPECT_EQ(pool.block_size(), 0) << "a kvstore must not fix the cluster's block size";

  auto tier = RemoteTier::Create(ClientOptions({(*server)->address()}, kBlock));
  ASSERT_TRUE(tier.ok()) << tier.status();
  const std::vector<BlockHash> chain = {101, 102, 103};
  for (size_t i = 0; i < chain.size(); ++i) {
    const BlockMeta m{.hash = chain[i], .parent = i == 0 ? kRootBlockHash : chain[i - 1]};
    ASSERT_TRUE((*tier)->Put(m, MakeBlock(kBlock, chain[i])).ok());
  }
  EXPECT_TRUE(WaitFor([&] { return HeldInTier(pool, o.id, chain, router::Tier::kRemote) == 3; },
                      absl::Seconds(10)));
  EXPECT_EQ(HeldInTier(pool, o.id, chain, router::Tier::kGpu), 0);
  // A removal travels too.
  ASSERT_TRUE((*tier)->Erase(102).ok());
  EXPECT_TRUE(WaitFor([&] { return HeldInTier(pool, o.id, chain, router::Tier::kRemote) == 1; },
                      absl::Seconds(10)));

  // The router forgets the daemon (as after a router restart): it registers again and resends
  // everything it holds.
  pool.Remove(o.id, "test");
  EXPECT_TRUE(WaitFor([&] { return HeldInTier(pool, o.id, chain, router::Tier::kRemote) == 1; },
                      absl::Seconds(10)));
  const std::vector<BlockHash> tail = {103};
  EXPECT_TRUE(WaitFor([&] { return pool.MatchPrefix(tail).size() == 1; }, absl::Seconds(10)));

  // A worker that follows the router hears of the daemon in its registration's answer and
  // in every heartbeat's.
  EXPECT_EQ(pool.KvstoreAddresses(), std::vector<std::string>{(*server)->address()});
  absl::Mutex mu;
  std::vector<std::vector<std::string>> heard;
  v1::WorkerInfo worker;
  worker.set_id("decode-0");
  worker.set_role(v1::ROLE_DECODE);
  worker.set_grpc_address("127.0.0.1:1");
  worker.set_model_identity("m");
  worker.set_block_size(16);
  proto::RegistryHooks hooks;
  hooks.kvstores = [&](std::vector<std::string> listed) {
    absl::MutexLock lock(&mu);
    heard.push_back(std::move(listed));
  };
  proto::RegistryClient client(*proto::RouterTargets::Parse(o.router_address, ""), worker,
                               std::move(hooks), absl::Milliseconds(50));
  client.Start();
  auto last_heard = [&] {
    absl::MutexLock lock(&mu);
    return heard.size() >= 2 ? std::optional(heard.back()) : std::nullopt;
  };
  EXPECT_TRUE(
      WaitFor([&] { return last_heard() == std::vector<std::string>{(*server)->address()}; },
              absl::Seconds(10)));
  EXPECT_EQ(pool.KvstoreAddresses().size(), 1u) << "a worker is not a kvstore";

  (*server)->Shutdown();  // deregisters
  EXPECT_EQ(pool.num_workers(), 1);
  EXPECT_TRUE(pool.KvstoreAddresses().empty());
  EXPECT_TRUE(
      WaitFor([&] { return last_heard() == std::vector<std::string>{}; }, absl::Seconds(10)));
  client.Stop();
  EXPECT_EQ(pool.num_workers(), 0);
  registry->Shutdown();
}

}  // namespace
}  // namespace strata::kvstore
