// G4 in one process: RemoteTier clients against real KvStoreServers over gRPC + UCX on
// loopback (round trips, runs, corrupt copies, lease and reservation expiry, one RPC per
// operation with owed settles, rendezvous placement over two daemons, the protocol's checks,
// metrics).
#include "strata/kvstore/remote_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "remote_raw_client.h"
#include "remote_test_util.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/proto/kvstore.grpc.pb.h"
#include "strata/proto/protocol.h"

namespace strata::kvstore {
namespace {

using testing::ClientOptions;
using testing::MakeBlock;

constexpr size_t kBlock = 64 << 10;

std::unique_ptr<KvStoreServer> StartServer(const std::string& id, int64_t capacity_blocks,
                                           absl::Duration lease_timeout = absl::Seconds(30),
                                           size_t block_bytes = kBlock,
                                           absl::Duration release_delay = absl::ZeroDuration()) {
  return testing::StartTestServer(id, capacity_blocks * int64_t{kBlock}, block_bytes, lease_timeout,
                                  release_delay);
}

std::unique_ptr<RemoteTier> Connect(std::vector<std::string> daemons) {
  return testing::ConnectTestTier(std::move(daemons), kBlock);
}

// A chain of n block metas (hash i+1 with parent i) starting at `first`.
std::vector<BlockMeta> Chain(uint64_t first, int n) {
  std::vector<BlockMeta> metas;
  for (int i = 0; i < n; ++i) {
    metas.push_back({.hash = first + uint64_t(i), .parent = i == 0 ? 0 : first + uint64_t(i) - 1});
  }
  return metas;
}

TEST(RemoteTierTest, PutGetRoundTrip) {
  auto server = StartServer("kvs-rt", 16);
  auto tier = Connect({server->address()});
  ASSERT_EQ(tier->connected_daemons(), 1);
  EXPECT_EQ(tier->kind(), TierKind::kRemote);
  for (uint64_t h = 1; h <= 3; ++h) {
    ASSERT_TRUE(tier->Put({.hash = h, .parent = h - 1}, MakeBlock(kBlock, h)).ok());
  }
  for (uint64_t h = 1; h <= 3; ++h) {
    std::vector<std::byte> out(kBlock);
    ASSERT_TRUE(tier->Get(h, out).ok());
    EXPECT_EQ(out, MakeBlock(kBlock, h)) << "block " << h;
  }
  std::vector<std::byte> out(kBlock);
  EXPECT_TRUE(absl::IsNotFound(tier->Get(99, out)));
  // A present block is left as is and not counted again.
  EXPECT_TRUE(tier->Put({.hash = 1}, MakeBlock(kBlock, 1)).ok());
  EXPECT_TRUE(tier->Contains(2));
  EXPECT_FALSE(tier->Contains(99));
  const std::vector<BlockHash> prefix = {1, 2, 3, 99, 1};
  EXPECT_EQ(tier->CountPrefix(prefix), 3);
  const TierStats s = tier->stats();
  EXPECT_EQ(s.puts, 3);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.bytes_in, int64_t{3 * kBlock});
  EXPECT_EQ(s.bytes_out, int64_t{3 * kBlock});
  EXPECT_EQ(tier->usage().blocks, 3);
  EXPECT_TRUE(absl::IsInvalidArgument(tier->Put({.hash = 5}, MakeBlock(kBlock - 1, 5))));
  ASSERT_TRUE(tier->Erase(2).ok());
  EXPECT_FALSE(tier->Contains(2));
}

TEST(RemoteTierTest, RunsMoveInOneCallAndStopAtTheFirstMiss) {
  auto server = StartServer("kvs-run", 64);
  auto tier = Connect({server->address()});
  const auto metas = Chain(1000, 20);  // longer than a lane (8 blocks): three pieces
  std::vector<std::byte> data;
  for (const BlockMeta& m : metas) {
    const auto b = MakeBlock(kBlock, m.hash);
    data.insert(data.end(), b.begin(), b.end());
  }
  ASSERT_TRUE(tier->PutRun(metas, data).ok());
  std::vector<BlockHash> hashes;
  for (const BlockMeta& m : metas) hashes.push_back(m.hash);
  hashes.push_back(5555);  // absent
  std::vector<std::byte> out(hashes.size() * kBlock);
  auto n = tier->GetRun(hashes, out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 20);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin()));
  EXPECT_EQ(tier->stats().hits, 20);
  EXPECT_EQ(tier->stats().misses, 1);
}

TEST(RemoteTierTest, CorruptCopyIsNeverServed) {
  auto server = StartServer("kvs-corrupt", 8);
  auto tier = Connect({server->address()});
  ASSERT_TRUE(tier->Put({.hash = 7}, MakeBlock(kBlock, 7)).ok());
  tier->Flush();  // the daemon publishes the block once it has the commit
  ASSERT_TRUE(server->CorruptBlockForTest(7).ok());
  std::vector<std::byte> out(kBlock, std::byte{0xee});
  const absl::Status s = tier->Get(7, out);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(out, std::vector<std::byte>(kBlock, std::byte{0xee})) << "corrupt bytes were copied";
  EXPECT_EQ(tier->stats().checksum_failures, 1);
  EXPECT_EQ(tier->stats().misses, 1);
  EXPECT_FALSE(tier->Contains(7)) << "the corrupt copy must be dropped";
  // A fresh copy is stored and served again.
  ASSERT_TRUE(tier->Put({.hash = 7}, MakeBlock(kBlock, 7)).ok());
  EXPECT_TRUE(tier->Get(7, out).ok());
  EXPECT_EQ(out, MakeBlock(kBlock, 7));
}

// A corrupt block in the middle of a run ends the run there (it stops at the first miss), with
// every block before it served and nothing of it or after it copied.
TEST(RemoteTierTest, CorruptBlockLateInARunEndsTheRunThere) {
  auto server = StartServer("kvs-corrupt-run", 16);
  auto tier = Connect({server->address()});
  const auto metas = Chain(300, 8);  // one lane: one piece of 8 blocks
  std::vector<std::byte> data;
  for (const BlockMeta& m : metas) {
    const auto b = MakeBlock(kBlock, m.hash);
    data.insert(data.end(), b.begin(), b.end());
  }
  ASSERT_TRUE(tier->PutRun(metas, data).ok());
  tier->Flush();
  ASSERT_TRUE(server->CorruptBlockForTest(306).ok());  // the 7th block
  std::vector<BlockHash> hashes;
  for (const BlockMeta& m : metas) hashes.push_back(m.hash);
  std::vector<std::byte> out(hashes.size() * kBlock, std::byte{0xee});
  auto n = tier->GetRun(hashes, out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 6);
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 6 * kBlock, out.begin()))
      << "the blocks before the corrupt one are served";
  EXPECT_TRUE(std::all_of(out.begin() + 6 * kBlock, out.end(),
                          [](std::byte b) { return b == std::byte{0xee}; }))
      << "nothing of the corrupt block or after it is copied";
  EXPECT_EQ(tier->stats().checksum_failures, 1);
  EXPECT_FALSE(tier->Contains(306));
  EXPECT_TRUE(tier->Contains(305));
}

using RawClient = testing::RawKvClient;

// The daemon's count of `method` RPCs answered OK, read from its /metrics (0 if none).
int RpcsOk(const KvStoreServer& server, const std::string& method) {
  const std::string m = testing::HttpGet(server.http_port(), "/metrics");
  const std::string key = "strata_kvstore_rpcs_total{method=\"" + method + "\",code=\"0\"} ";
  const size_t at = m.find(key);
  return at == std::string::npos ? 0 : std::stoi(m.substr(at + key.size()));
}

TEST(RemoteTierTest, ExpiredLeasesFreeTheirSlots) {
  const absl::Duration lease = absl::Milliseconds(200);
  auto server = StartServer("kvs-lease", 2, lease);
  auto tier = Connect({server->address()});
  ASSERT_TRUE(tier->Put({.hash = 1}, MakeBlock(kBlock, 1)).ok());
  ASSERT_TRUE(tier->Put({.hash = 2}, MakeBlock(kBlock, 2)).ok());
  tier->Flush();  // block 2's commit is owed until then
  // A reader that leases both blocks and never releases them (e.g. it died).
  RawClient raw(server->address());
  v1::KvHelloResponse hello;
  ASSERT_TRUE(raw.Hello(kBlock, &hello).ok());
  v1::KvAcquireResponse leases;
  ASSERT_TRUE(raw.Acquire(hello.instance(), {1, 2}, &leases).ok());
  ASSERT_TRUE(leases.leases(0).found() && leases.leases(1).found());
  // Leased blocks are never evicted: no room.
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Put({.hash = 3}, MakeBlock(kBlock, 3))));
  EXPECT_EQ(tier->stats().rejected, 1);
  EXPECT_TRUE(tier->Contains(1) && tier->Contains(2));
  // Once the leases time out, the store evicts again.
  absl::SleepFor(lease * 3);
  ASSERT_TRUE(tier->Put({.hash = 3}, MakeBlock(kBlock, 3)).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(tier->Get(3, out).ok());
  EXPECT_EQ(out, MakeBlock(kBlock, 3));
}

// A read's release is owed, not sent, but it reaches the daemon before the tier's next request
// there (it rides on it): a full pool whose every block was just read (and leased) takes new
// blocks at once, with nothing rejected and no lease left to expire. (A release racing the next
// request would make these puts fail with ResourceExhausted: the daemon delays every release to
// expose it.)
TEST(RemoteTierTest, ReleasesReachTheDaemonBeforeTheNextRequest) {
  constexpr int kBlocks = 4;
  auto server = StartServer("kvs-release", kBlocks, /*lease_timeout=*/absl::Seconds(60), kBlock,
                            /*release_delay=*/absl::Milliseconds(30));
  auto tier = Connect({server->address()});
  for (int round = 0; round < 5; ++round) {
    const auto metas = Chain(100 * uint64_t(round + 1), kBlocks);
    std::vector<std::byte> data;
    std::vector<BlockHash> hashes;
    for (const BlockMeta& m : metas) {
      const auto b = MakeBlock(kBlock, m.hash);
      data.insert(data.end(), b.begin(), b.end());
      hashes.push_back(m.hash);
    }
    ASSERT_TRUE(tier->PutRun(metas, data).ok()) << "round " << round;  // evicts the last round
    std::vector<std::byte> out(data.size());
    auto n = tier->GetRun(hashes, out);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, kBlocks);
    EXPECT_EQ(out, data);
  }
  EXPECT_EQ(tier->stats().rejected, 0);
  const std::string metrics = testing::HttpGet(server->http_port(), "/metrics");
  EXPECT_NE(metrics.find("strata_kvstore_expired_leases_total{tier=\"remote\"} 0"),
            std::string::npos)
      << metrics;
}

// A put or a get costs one round trip: a put's commit and a get's release ride on the tier's
// next request to the daemon, and nothing is sent alone before settle_delay (here: never).
TEST(RemoteTierTest, OneRoundTripPerPutAndGet) {
  auto server = StartServer("kvs-one-trip", 16);
  RemoteTierOptions o = ClientOptions({server->address()}, kBlock);
  o.settle_delay = absl::Hours(1);
  auto tier = RemoteTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr int kOps = 5;
  for (uint64_t h = 1; h <= kOps; ++h) {
    ASSERT_TRUE((*tier)->Put({.hash = h}, MakeBlock(kBlock, h)).ok());
  }
  for (uint64_t h = 1; h <= kOps; ++h) {
    std::vector<std::byte> out(kBlock);
    ASSERT_TRUE((*tier)->Get(h, out).ok()) << "the tier must see its own put " << h;
    EXPECT_EQ(out, MakeBlock(kBlock, h));
  }
  EXPECT_EQ(RpcsOk(*server, "ReserveWrite"), kOps);
  EXPECT_EQ(RpcsOk(*server, "Acquire"), kOps);
  EXPECT_EQ(RpcsOk(*server, "Settle"), 0);
  EXPECT_EQ((*tier)->stats().puts, kOps) << "every commit rode on a later request";
  // What is left (the last get's release) goes in one Settle; a destroyed tier flushes too.
  (*tier)->Flush();
  EXPECT_EQ(RpcsOk(*server, "Settle"), 1);
  ASSERT_TRUE((*tier)->Put({.hash = 99}, MakeBlock(kBlock, 99)).ok());
  tier->reset();
  auto other = Connect({server->address()});
  EXPECT_TRUE(other->Contains(99));
  const std::string metrics = testing::HttpGet(server->http_port(), "/metrics");
  EXPECT_NE(metrics.find("strata_kvstore_expired_leases_total{tier=\"remote\"} 0"),
            std::string::npos)
      << metrics;
}

// With no request to carry them, owed commits and releases go out after settle_delay: another
// client sees the put, and the slot of a block the tier read is free again long before the
// lease would expire (a one-block pool takes another block).
TEST(RemoteTierTest, OwedSettlesGoOutWithoutARequest) {
  auto server = StartServer("kvs-settle", 1);
  RemoteTierOptions o = ClientOptions({server->address()}, kBlock);
  o.settle_delay = absl::Milliseconds(20);
  auto writer = RemoteTier::Create(o);
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto other = Connect({server->address()});
  ASSERT_TRUE((*writer)->Put({.hash = 1}, MakeBlock(kBlock, 1)).ok());
  EXPECT_TRUE(testing::WaitFor([&] { return other->Contains(1); }, absl::Seconds(5)));
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE((*writer)->Get(1, out).ok());
  EXPECT_TRUE(testing::WaitFor([&] { return other->Put({.hash = 2}, MakeBlock(kBlock, 2)).ok(); },
                               absl::Seconds(5)));
  other->Flush();
  EXPECT_TRUE(other->Contains(2));
  EXPECT_FALSE(other->Contains(1));
}

// The daemon trusts a commit's checksum (it never reads the slot back), so a writer that lied
// (or bytes that went bad in the pool) is caught by the reader: a miss, counted, never served.
TEST(RemoteTierTest, CommitIsTrustedAndTheReaderVerifies) {
  auto server = StartServer("kvs-trust", 4);
  auto tier = Connect({server->address()});
  RawClient raw(server->address());
  v1::KvHelloResponse hello;
  ASSERT_TRUE(raw.Hello(kBlock, &hello).ok());
  v1::KvReserveWriteResponse reserved;
  ASSERT_TRUE(raw.Reserve(hello.instance(), {5}, &reserved).ok());
  ASSERT_EQ(reserved.reservations(0).code(), 0u);
  v1::KvSettleResponse settled;  // nothing was written into the slot
  ASSERT_TRUE(raw.Commit(hello.instance(), reserved.reservations(0).id(), 12345, &settled).ok());
  ASSERT_EQ(settled.commit_codes_size(), 1);
  EXPECT_EQ(settled.commit_codes(0), 0u) << "a commit is not verified by the daemon";
  EXPECT_TRUE(tier->Contains(5));
  std::vector<std::byte> out(kBlock, std::byte{0xee});
  EXPECT_TRUE(absl::IsDataLoss(tier->Get(5, out)));
  EXPECT_EQ(out, std::vector<std::byte>(kBlock, std::byte{0xee}));
  EXPECT_EQ(tier->stats().checksum_failures, 1);
  EXPECT_FALSE(tier->Contains(5));
}

// A writer that reserves slots and dies before it settles never keeps them: the reservations
// expire and the pool takes other blocks again.
TEST(RemoteTierTest, UnsettledReservationsExpire) {
  const absl::Duration lease = absl::Milliseconds(200);
  auto server = StartServer("kvs-res-expire", 2, lease);
  auto tier = Connect({server->address()});
  RawClient raw(server->address());
  v1::KvHelloResponse hello;
  ASSERT_TRUE(raw.Hello(kBlock, &hello).ok());
  v1::KvReserveWriteResponse reserved;
  ASSERT_TRUE(raw.Reserve(hello.instance(), {1, 2}, &reserved).ok());
  ASSERT_EQ(reserved.reservations(1).code(), 0u);
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Put({.hash = 3}, MakeBlock(kBlock, 3))));
  absl::SleepFor(lease * 3);
  ASSERT_TRUE(tier->Put({.hash = 3}, MakeBlock(kBlock, 3)).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(tier->Get(3, out).ok());
  EXPECT_EQ(out, MakeBlock(kBlock, 3));
}

TEST(RemoteTierTest, TwoDaemonsSplitBlocksByRendezvousHashing) {
  auto a = StartServer("kvs-a", 64);
  auto b = StartServer("kvs-b", 64);
  auto tier = Connect({a->address(), b->address()});
  ASSERT_EQ(tier->connected_daemons(), 2);
  const auto metas = Chain(1, 40);
  std::vector<std::byte> data;
  int on_a = 0;
  for (const BlockMeta& m : metas) {
    const auto blk = MakeBlock(kBlock, m.hash);
    data.insert(data.end(), blk.begin(), blk.end());
    on_a += tier->DaemonFor(m.hash) == 0 ? 1 : 0;
  }
  ASSERT_GT(on_a, 0);
  ASSERT_LT(on_a, 40);
  ASSERT_TRUE(tier->PutRun(metas, data).ok());
  tier->Flush();  // other clients see the blocks once their commits are in
  // Each daemon holds exactly the blocks rendezvous hashing gives it.
  auto only_a = Connect({a->address()});
  auto only_b = Connect({b->address()});
  EXPECT_EQ(only_a->usage().blocks, on_a);
  EXPECT_EQ(only_b->usage().blocks, 40 - on_a);
  for (const BlockMeta& m : metas) {
    const bool want_a = tier->DaemonFor(m.hash) == 0;
    EXPECT_EQ(only_a->Contains(m.hash), want_a) << m.hash;
    EXPECT_EQ(only_b->Contains(m.hash), !want_a) << m.hash;
  }
  // Another client listing the daemons in another order agrees on every block's home.
  auto other = Connect({b->address(), a->address()});
  std::vector<BlockHash> hashes;
  for (const BlockMeta& m : metas) hashes.push_back(m.hash);
  std::vector<std::byte> out(data.size());
  auto n = other->GetRun(hashes, out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 40);
  EXPECT_EQ(out, data);
}

TEST(RemoteTierTest, RendezvousMovesOnlyTheRemovedDaemonsBlocks) {
  const std::vector<std::string> three = {"h1:1", "h2:2", "h3:3"};
  const std::vector<std::string> two = {"h1:1", "h3:3"};
  std::set<int> used;
  for (BlockHash h = 1; h <= 3000; ++h) {
    const int p3 = RendezvousPick(h, three);
    used.insert(p3);
    const std::string& home = three[p3];
    if (home != "h2:2") {
      EXPECT_EQ(two[RendezvousPick(h, two)], home) << h;
    }
  }
  EXPECT_EQ(used.size(), 3u);
  EXPECT_EQ(RendezvousPick(1, {}), -1);
}

TEST(RemoteTierTest, ProtocolChecks) {
  auto server = StartServer("kvs-proto", 4);
  RawClient raw(server->address());
  v1::KvHelloResponse hello;
  grpc::Status s = raw.Hello(kBlock, &hello, proto::kProtocolVersion + 7);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find(std::to_string(proto::kProtocolVersion + 7)), std::string::npos);
  EXPECT_NE(s.error_message().find(std::to_string(proto::kProtocolVersion)), std::string::npos);
  s = raw.Hello(kBlock * 2, &hello);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << "another block size";
  ASSERT_TRUE(raw.Hello(kBlock, &hello).ok());
  EXPECT_EQ(hello.block_bytes(), kBlock);
  EXPECT_EQ(hello.capacity_blocks(), 4u);
  EXPECT_EQ(hello.daemon_id(), "kvs-proto");
  v1::KvAcquireResponse r;
  s = raw.Acquire(hello.instance() + 1, {1}, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("stale instance"), std::string::npos);
  std::vector<uint64_t> many(kMaxKvBlocksPerRequest + 1, 5);
  s = raw.Acquire(hello.instance(), many, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    v1::KvSettleRequest settle;
    settle.set_protocol_version(proto::kProtocolVersion);
    settle.set_instance(hello.instance());
    for (uint64_t id : many) settle.mutable_settle()->add_release_ids(id);
    v1::KvSettleResponse settled;
    EXPECT_EQ(raw.stub->Settle(&ctx, settle, &settled).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << "a settle is bounded like a request";
  }
  // A client with another block size cannot connect.
  RemoteTierOptions o = ClientOptions({server->address()}, kBlock / 2);
  auto t = RemoteTier::Create(o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->connected_daemons(), 0);
  EXPECT_TRUE(absl::IsUnavailable((*t)->Put({.hash = 1}, MakeBlock(kBlock / 2, 1))));
}

TEST(RemoteTierTest, FirstHelloFixesTheBlockSize) {
  auto server = StartServer("kvs-lazy", 8, absl::Seconds(30), /*block_bytes=*/0);
  auto tier = Connect({server->address()});
  ASSERT_EQ(tier->connected_daemons(), 1);
  ASSERT_TRUE(tier->Put({.hash = 42}, MakeBlock(kBlock, 42)).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(tier->Get(42, out).ok());
  EXPECT_EQ(out, MakeBlock(kBlock, 42));
}

// Resident pages of this process (/proc/self/statm), in bytes.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(RemoteTierTest, ThePoolIsFaultedInBeforeTheFirstHello) {
  // A daemon that learns its block size from the first Hello still allocates and faults in
  // its whole pool at start: the Hello only lays slots over it (a pool of several GiB takes
  // seconds to fault in, longer than a client's RPC deadline).
  constexpr int64_t kPool = 64 << 20;
  const int64_t before = ResidentBytes();
  auto server = testing::StartTestServer("kvs-reserved", kPool, /*block_bytes=*/0);
  ASSERT_NE(server, nullptr);
  EXPECT_GE(ResidentBytes() - before, kPool * 9 / 10);
  // The first Hello's block size need not divide the pool: slots are its whole blocks.
  constexpr size_t kOdd = 3 * kBlock;
  auto tier = testing::ConnectTestTier({server->address()}, kOdd);
  ASSERT_NE(tier, nullptr);
  ASSERT_EQ(tier->connected_daemons(), 1);
  ASSERT_TRUE(tier->Put({.hash = 7}, MakeBlock(kOdd, 7)).ok());
  std::vector<std::byte> out(kOdd);
  ASSERT_TRUE(tier->Get(7, out).ok());
  EXPECT_EQ(out, MakeBlock(kOdd, 7));
}

TEST(RemoteTierTest, MetricsAndHealthOverHttp) {
  auto server = StartServer("kvs-metrics", 8);
  ASSERT_GT(server->http_port(), 0);
  auto tier = Connect({server->address()});
  ASSERT_TRUE(tier->Put({.hash = 1}, MakeBlock(kBlock, 1)).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(tier->Get(1, out).ok());
  EXPECT_EQ(testing::HttpGet(server->http_port(), "/health"), "ok\n");
  const std::string m = testing::HttpGet(server->http_port(), "/metrics");
  EXPECT_NE(m.find("strata_kvstore_usage_blocks{tier=\"remote\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("strata_kvstore_capacity_bytes{tier=\"remote\"} " + std::to_string(8 * kBlock)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("strata_kvstore_hits_total{tier=\"remote\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("strata_kvstore_rpcs_total{method=\"Acquire\",code=\"0\"} 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find("strata_kvstore_checksum_failures_total{tier=\"remote\"} 0"), std::string::npos)
      << m;
}

}  // namespace
}  // namespace strata::kvstore
