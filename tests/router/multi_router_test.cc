// One process registered with several routers (proto::RegistryClient): every router's worker
// table and KV index are complete on their own, a router that restarts is registered with again
// and resynced, and a resync caused by one router replaces (not merges into) every router's
// index, so removals that the resync swallowed are not left behind anywhere. Real gRPC Registry
// services over real WorkerPools, in process.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "strata/proto/protocol.h"
#include "strata/proto/registry_client.h"
#include "strata/router/registry_service.h"
#include "strata/router/worker_pool.h"

namespace strata::router {
namespace {

template <typename F>
bool WaitFor(F done, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

// A router's registry: a WorkerPool behind the router's Registry service on a gRPC port. A
// restart (a new pool, the same port) forgets every worker, as a restarted router does.
class FakeRouter {
 public:
  explicit FakeRouter(int port = 0) { Start(port); }
  ~FakeRouter() { Kill(); }

  void Start(int port) {
    pool_ = std::make_unique<WorkerPool>(absl::Seconds(30));
    service_ = std::make_unique<RegistryService>(pool_.get(), nullptr);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port),
                             grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void Kill() {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now()));
    server_.reset();
  }
  void Restart() {
    const int port = port_;
    Kill();
    Start(port);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  WorkerPool& pool() { return *pool_; }
  bool Knows(const std::string& id) {
    for (const WorkerView& w : pool_->Snapshot()) {
      if (w.id == id) return true;
    }
    return false;
  }
  // The blocks this router's index says the worker holds on its device tier, among `hashes`.
  std::set<BlockHash> Held(const std::string& id, const std::vector<BlockHash>& hashes) {
    WorkerId index_id = 0;
    bool found = false;
    for (const WorkerView& w : pool_->Snapshot()) {
      if (w.id == id) index_id = w.index_id, found = true;
    }
    std::set<BlockHash> out;
    if (!found) return out;
    for (BlockHash h : hashes) {
      const std::vector<BlockHash> one = {h};
      for (const WorkerMatch& m : pool_->MatchPrefix(one)) {
        if (m.worker == index_id && m.tier_blocks[0] == 1) out.insert(h);
      }
    }
    return out;
  }

 private:
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<RegistryService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A worker's device tier as its registry hooks see it: blocks stored and removed, events
// queued until taken, and a resync that replaces the queue with CLEARED and the contents.
class FakeBlocks {
 public:
  void Store(BlockHash h) {
    absl::MutexLock lock(&mu_);
    held_.insert(h);
    events_.push_back(Event(v1::KvEvent::STORED, h));
  }
  void Remove(BlockHash h) {
    absl::MutexLock lock(&mu_);
    held_.erase(h);
    events_.push_back(Event(v1::KvEvent::REMOVED, h));
  }
  std::set<BlockHash> held() {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  int resyncs() {
    absl::MutexLock lock(&mu_);
    return resyncs_;
  }
  // `h` is removed just before the next resync, so the resync swallows its queued removal.
  void RemoveJustBeforeNextResync(BlockHash h) {
    absl::MutexLock lock(&mu_);
    remove_at_resync_ = h;
  }
  proto::RegistryHooks Hooks() {
    proto::RegistryHooks hooks;
    hooks.take_events = [this] {
      absl::MutexLock lock(&mu_);
      std::vector<v1::KvEvent> out;
      out.swap(events_);
      return out;
    };
    hooks.resync = [this] {
      absl::MutexLock lock(&mu_);
      ++resyncs_;
      if (remove_at_resync_ != 0) {
        held_.erase(remove_at_resync_);
        events_.push_back(Event(v1::KvEvent::REMOVED, remove_at_resync_));
        remove_at_resync_ = 0;
      }
      events_.clear();
      events_.push_back(Event(v1::KvEvent::CLEARED, 0));
      for (BlockHash h : held_) events_.push_back(Event(v1::KvEvent::STORED, h));
    };
    return hooks;
  }

 private:
  static v1::KvEvent Event(v1::KvEvent::Kind kind, BlockHash h) {
    v1::KvEvent e;
    e.set_kind(kind);
    e.set_hash(h);
    e.set_tier(0);
    return e;
  }
  absl::Mutex mu_;
  std::set<BlockHash> held_;
  std::vector<v1::KvEvent> events_;
  int resyncs_ = 0;
  BlockHash remove_at_resync_ = 0;
};

v1::WorkerInfo Info(const std::string& id) {
  v1::WorkerInfo info;
  info.set_id(id);
  info.set_role(v1::ROLE_DECODE);
  info.set_grpc_address("127.0.0.1:1");
  info.set_model_identity("m");
  info.set_block_size(16);
  return info;
}

const std::vector<BlockHash> kAll = {11, 12, 13, 14, 15, 16};

TEST(MultiRouterTest, EveryRouterKnowsTheWorkerAndIndexesEveryBlock) {
  FakeRouter a, b;
  FakeBlocks blocks;
  auto routers = proto::RouterTargets::Parse(a.address() + "," + b.address(), "");
  ASSERT_TRUE(routers.ok()) << routers.status();
  proto::RegistryClient client(*routers, Info("d0"), blocks.Hooks(), absl::Milliseconds(50));
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return client.registered_routers() == 2; }));
  EXPECT_TRUE(a.Knows("d0"));
  EXPECT_TRUE(b.Knows("d0"));
  for (BlockHash h : {11, 12, 13}) blocks.Store(h);
  blocks.Remove(12);
  const std::set<BlockHash> want = {11, 13};
  EXPECT_TRUE(WaitFor([&] { return a.Held("d0", kAll) == want && b.Held("d0", kAll) == want; }))
      << "a holds " << a.Held("d0", kAll).size() << ", b " << b.Held("d0", kAll).size();
  client.Stop();  // deregisters from both
  EXPECT_FALSE(a.Knows("d0"));
  EXPECT_FALSE(b.Knows("d0"));
}

TEST(MultiRouterTest, ARestartedRouterIsResyncedAndTheOtherStaysExact) {
  FakeRouter a, b;
  FakeBlocks blocks;
  auto routers = proto::RouterTargets::Parse(a.address() + "," + b.address(), "");
  ASSERT_TRUE(routers.ok());
  proto::RegistryClient client(*routers, Info("d0"), blocks.Hooks(), absl::Milliseconds(50));
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return client.registered_routers() == 2; }));
  for (BlockHash h : {11, 12, 13, 14}) blocks.Store(h);
  ASSERT_TRUE(WaitFor([&] { return b.Held("d0", kAll).size() == 4; }));

  a.Kill();
  // While a is down the worker keeps serving b: blocks come and go.
  blocks.Remove(11);
  blocks.Store(15);
  EXPECT_TRUE(WaitFor([&] { return b.Held("d0", kAll) == blocks.held(); }));
  EXPECT_TRUE(WaitFor([&] { return client.registered_routers() == 1; }));
  EXPECT_TRUE(client.registered());

  a.Restart();  // an empty router on the same port
  EXPECT_TRUE(WaitFor([&] { return client.registered_routers() == 2 && a.Knows("d0"); }));
  blocks.Remove(13);
  EXPECT_TRUE(WaitFor([&] {
    return a.Held("d0", kAll) == blocks.held() && b.Held("d0", kAll) == blocks.held();
  })) << "a holds " << a.Held("d0", kAll).size() << ", b " << b.Held("d0", kAll).size()
      << ", the worker " << blocks.held().size();
}

TEST(MultiRouterTest, AResyncForOneRouterLeavesNoRemovedBlockInTheOther) {
  FakeRouter a, b;
  FakeBlocks blocks;
  auto routers = proto::RouterTargets::Parse(a.address() + "," + b.address(), "");
  ASSERT_TRUE(routers.ok());
  proto::RegistryClient client(*routers, Info("d0"), blocks.Hooks(), absl::Milliseconds(50));
  client.Start();
  ASSERT_TRUE(WaitFor([&] { return client.registered_routers() == 2; }));
  for (BlockHash h : {11, 12, 13}) blocks.Store(h);
  ASSERT_TRUE(WaitFor([&] { return b.Held("d0", kAll).size() == 3; }));
  const int resyncs = blocks.resyncs();

  // a forgets the worker (as after missed heartbeats) and a block is removed at the same
  // moment: the resync a's re-registration causes drops the queued removal, which b must still
  // act on.
  blocks.RemoveJustBeforeNextResync(12);
  a.pool().Remove("d0", "test");
  ASSERT_TRUE(WaitFor([&] { return blocks.resyncs() > resyncs && a.Knows("d0"); }));
  const std::set<BlockHash> want = {11, 13};
  EXPECT_TRUE(WaitFor([&] { return a.Held("d0", kAll) == want && b.Held("d0", kAll) == want; }))
      << "a holds " << a.Held("d0", kAll).size() << ", b " << b.Held("d0", kAll).size();
}

TEST(MultiRouterTest, AServiceNameRegistersWithEveryAddressItResolvesTo) {
  FakeRouter a;
  FakeBlocks blocks;
  auto routers = proto::RouterTargets::Parse("", "localhost:" + std::to_string(a.port()));
  ASSERT_TRUE(routers.ok());
  routers->resolve_interval = absl::Milliseconds(100);
  proto::RegistryClient client(*routers, Info("d0"), blocks.Hooks(), absl::Milliseconds(50));
  client.Start();
  EXPECT_TRUE(WaitFor([&] { return a.Knows("d0"); }));
  const std::vector<std::string> linked = client.routers();
  EXPECT_NE(std::find(linked.begin(), linked.end(), a.address()), linked.end());
}

TEST(MultiRouterTest, BadRouterListsAreRefusedWithTheEntry) {
  for (const char* bad : {"host", "host:0", "host:70000", ":80", "a:1,b"}) {
    auto t = proto::RouterTargets::Parse(bad, "");
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find("host:port"), std::string::npos) << t.status();
  }
  std::string many;
  for (int i = 0; i < 65; ++i) many += "h" + std::to_string(i) + ":1,";
  EXPECT_FALSE(proto::RouterTargets::Parse(many, "").ok());
  auto ok = proto::RouterTargets::Parse(" a:1, [::1]:2 ", "svc:3");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->addresses, (std::vector<std::string>{"a:1", "[::1]:2"}));
  EXPECT_EQ(ok->services, (std::vector<std::string>{"svc:3"}));
}

}  // namespace
}  // namespace strata::router
