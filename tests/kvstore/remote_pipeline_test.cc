// G4 puts pipelined piece by piece (RemoteTierImpl::PutItems: a piece's transfer is on the wire
// while the next one is reserved and staged): runs of many more pieces than lanes, to one and to
// several daemons, over UCX's own transport choice and over TCP (where a transfer really is in
// flight while the next piece is staged), with one lane (no pipelining possible, and no
// deadlock) and from several threads at once; and the per-block results of a daemon that is
// full or answers with a slot no transfer can reach, which must be what they were before puts
// were pipelined. Real KvStoreServers over gRPC + UCX on loopback, in one process; nothing
// depends on timing.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "remote_raw_client.h"
#include "remote_test_util.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/kvstore/remote_tier.h"
#include "strata/proto/kvstore.grpc.pb.h"
#include "strata/proto/protocol.h"

namespace strata::kvstore {
namespace {

using testing::ClientOptions;
using testing::MakeBlock;

constexpr size_t kBlock = 64 << 10;

std::unique_ptr<KvStoreServer> StartServer(const std::string& id, int64_t capacity_blocks,
                                           size_t block_bytes = kBlock) {
  return testing::StartTestServer(id, capacity_blocks * int64_t(block_bytes), block_bytes);
}

// A client whose lanes hold `lane_blocks` blocks each, so a run moves in many pieces.
std::unique_ptr<RemoteTier> Connect(std::vector<std::string> daemons, int lanes, size_t lane_blocks,
                                    size_t block_bytes = kBlock) {
  RemoteTierOptions o = ClientOptions(std::move(daemons), block_bytes);
  o.lanes = lanes;
  o.staging_bytes = size_t(lanes) * lane_blocks * block_bytes;
  auto t = RemoteTier::Create(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<BlockMeta> Chain(uint64_t first, int n) {
  std::vector<BlockMeta> metas;
  for (int i = 0; i < n; ++i) {
    metas.push_back({.hash = first + uint64_t(i), .parent = i == 0 ? 0 : first + uint64_t(i) - 1});
  }
  return metas;
}

std::vector<BlockHash> Hashes(std::span<const BlockMeta> metas) {
  std::vector<BlockHash> h;
  for (const BlockMeta& m : metas) h.push_back(m.hash);
  return h;
}

// The blocks of `metas` back to back (block i = MakeBlock(block_bytes, metas[i].hash)).
std::vector<std::byte> RunData(std::span<const BlockMeta> metas, size_t block_bytes = kBlock) {
  std::vector<std::byte> data;
  for (const BlockMeta& m : metas) {
    const auto b = MakeBlock(block_bytes, m.hash);
    data.insert(data.end(), b.begin(), b.end());
  }
  return data;
}

// Reads `metas` back with one GetRun and expects every block, byte-identical.
void ExpectStored(RemoteTier& tier, std::span<const BlockMeta> metas) {
  const std::vector<std::byte> want = RunData(metas, tier.block_bytes());
  std::vector<std::byte> out(want.size());
  auto n = tier.GetRun(Hashes(metas), out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, static_cast<int>(metas.size()));
  EXPECT_TRUE(out == want) << "the blocks read back differ from the blocks put";
}

// (UCX_TLS for the daemons and the client, "" = UCX's own choice; lanes; daemons).
using Param = std::tuple<const char*, int, int>;

class RemotePipelineTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto [tls, lanes, daemons] = GetParam();
    if (*tls != '\0') setenv("UCX_TLS", tls, 1);
    std::vector<std::string> addresses;
    for (int i = 0; i < daemons; ++i) {
      servers_.push_back(StartServer("kvs-pipe-" + std::to_string(i), 256));
      addresses.push_back(servers_.back()->address());
    }
    tier_ = Connect(addresses, lanes, /*lane_blocks=*/2);
    if (*tls != '\0') unsetenv("UCX_TLS");
    ASSERT_NE(tier_, nullptr);
    ASSERT_EQ(tier_->connected_daemons(), daemons);
  }

  std::vector<std::unique_ptr<KvStoreServer>> servers_;
  std::unique_ptr<RemoteTier> tier_;
};

// A run of 37 blocks in pieces of 2 blocks (19 pieces or more: more than the lanes), put as one
// contiguous run and as scattered blocks (PutBlocks, sources in reverse order), every block
// committed, counted once and read back byte-identical.
TEST_P(RemotePipelineTest, StagedRunOfManyPiecesArrivesWhole) {
  constexpr int kRun = 37;
  const auto metas = Chain(1000, kRun);
  const auto data = RunData(metas);
  ASSERT_TRUE(tier_->PutRun(metas, data).ok());

  const auto scattered = Chain(5000, kRun);
  std::vector<std::vector<std::byte>> blocks;
  for (int i = kRun - 1; i >= 0; --i) blocks.push_back(MakeBlock(kBlock, scattered[i].hash));
  std::vector<const std::byte*> srcs(kRun);
  for (int i = 0; i < kRun; ++i) srcs[i] = blocks[kRun - 1 - i].data();
  const std::vector<absl::Status> results = tier_->PutBlocks(scattered, srcs);
  ASSERT_EQ(results.size(), size_t(kRun));
  for (int i = 0; i < kRun; ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << results[i];

  tier_->Flush();
  EXPECT_EQ(tier_->stats().puts, 2 * kRun);
  EXPECT_EQ(tier_->stats().rejected, 0);
  EXPECT_EQ(tier_->path_stats().staged_blocks, 2 * kRun);
  EXPECT_EQ(tier_->usage().blocks, 2 * kRun);
  ExpectStored(*tier_, metas);
  ExpectStored(*tier_, scattered);
  // Present blocks are skipped, not sent again.
  ASSERT_TRUE(tier_->PutRun(metas, data).ok());
  tier_->Flush();
  EXPECT_EQ(tier_->stats().puts, 2 * kRun);
}

INSTANTIATE_TEST_SUITE_P(TlsLanesDaemons, RemotePipelineTest,
                         ::testing::Combine(::testing::Values("", "tcp"),
                                            ::testing::Values(1, 2, 3), ::testing::Values(1, 3)),
                         [](const auto& info) {
                           const char* tls = std::get<0>(info.param);
                           return std::string(*tls != '\0' ? tls : "default") + "_lanes" +
                                  std::to_string(std::get<1>(info.param)) + "_daemons" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Threads that each pipeline a run over two lanes: a thread holding one lane never waits for
// the other (which another thread may hold while it waits for the first): no deadlock, and
// no lane shared by two transfers.
TEST(RemotePipelineTest, ConcurrentRunsShareTwoLanes) {
  auto server = StartServer("kvs-pipe-threads", 512);
  auto tier = Connect({server->address()}, /*lanes=*/2, /*lane_blocks=*/2);
  constexpr int kThreads = 4;
  constexpr int kRun = 24;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        const auto metas = Chain(100000 * uint64_t(t + 1) + 1000 * uint64_t(round), kRun);
        if (!tier->PutRun(metas, RunData(metas)).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  tier->Flush();
  EXPECT_EQ(tier->stats().puts, kThreads * 3 * kRun);
  for (int t = 0; t < kThreads; ++t) {
    for (int round = 0; round < 3; ++round) {
      ExpectStored(*tier, Chain(100000 * uint64_t(t + 1) + 1000 * uint64_t(round), kRun));
    }
  }
}

// A run from registered memory longer than one request may name (kMaxKvBlocksPerRequest
// blocks): three direct pieces each way, pipelined, byte-exact, none through staging.
TEST(RemotePipelineTest, RegisteredRunOfSeveralPiecesIsByteExact) {
  constexpr size_t kSmall = 4 << 10;
  constexpr int kRun = 2 * kMaxKvBlocksPerRequest + 5;
  constexpr size_t kBytes = kRun * kSmall;
  auto server = StartServer("kvs-pipe-reg", kRun, kSmall);
  auto tier = Connect({server->address()}, /*lanes=*/2, /*lane_blocks=*/2, kSmall);
  const auto metas = Chain(1, kRun);
  std::vector<std::byte> memory = RunData(metas, kSmall);
  memory.resize(2 * kBytes);  // the source run, then where it is read back
  ASSERT_TRUE(tier->RegisterRegion(memory.data(), memory.size()).ok());
  ASSERT_TRUE(tier->PutRun(metas, {memory.data(), kBytes}).ok());
  tier->Flush();
  EXPECT_EQ(tier->stats().puts, kRun);
  auto n = tier->GetRun(Hashes(metas), {memory.data() + kBytes, kBytes});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kRun);
  EXPECT_EQ(std::memcmp(memory.data(), memory.data() + kBytes, kBytes), 0);
  EXPECT_EQ(tier->path_stats().direct_blocks, 2 * kRun);
  EXPECT_EQ(tier->path_stats().staged_blocks, 0);
}

// Another client of the shared daemon: holds leases and reservations the way other readers
// and writers would. Acquire / Reserve return how many blocks were found / granted.
struct RawClient {
  explicit RawClient(const std::string& address) : raw(address) {
    v1::KvHelloResponse resp;
    EXPECT_TRUE(raw.Hello(kBlock, &resp).ok());
    instance = resp.instance();
  }
  int Acquire(const std::vector<uint64_t>& hashes) {
    v1::KvAcquireResponse resp;
    EXPECT_TRUE(raw.Acquire(instance, hashes, &resp).ok());
    int found = 0;
    for (const v1::KvLease& l : resp.leases()) found += l.found() ? 1 : 0;
    return found;
  }
  int Reserve(const std::vector<uint64_t>& hashes) {
    v1::KvReserveWriteResponse resp;
    EXPECT_TRUE(raw.Reserve(instance, hashes, &resp).ok());
    int granted = 0;
    for (const v1::KvReservation& r : resp.reservations()) granted += r.code() == 0 ? 1 : 0;
    return granted;
  }
  testing::RawKvClient raw;
  uint64_t instance = 0;
};

// A daemon of 8 slots: 4 hold blocks another reader leases, 2 are reserved by another writer,
// 2 are free. A put of 12 blocks in pieces of 4, the first two already present: each piece
// gets the free slots, or those of the previous piece's blocks once their commits reached the
// daemon, and no more. Before puts were pipelined each piece's ReserveWrite carried the
// previous piece's commits; now that piece is still in flight when the next one reserves, so
// the tier settles it and asks again for what was refused: the same blocks are stored, the
// same refused, with the same per-block results and counters.
TEST(RemotePipelineTest, FullDaemonRefusesTheSameBlocksAsBefore) {
  auto server = StartServer("kvs-pipe-full", 8);
  auto tier = Connect({server->address()}, /*lanes=*/2, /*lane_blocks=*/4);
  const auto present = Chain(1, 4);
  ASSERT_TRUE(tier->PutRun(present, RunData(present)).ok());
  tier->Flush();
  RawClient other(server->address());
  ASSERT_EQ(other.Acquire({1, 2, 3, 4}), 4);
  ASSERT_EQ(other.Reserve({900, 901}), 2);

  std::vector<BlockMeta> metas = {present[0], present[1]};
  for (uint64_t h = 10; h < 20; ++h) metas.push_back({.hash = h});
  const auto data = RunData(metas);
  std::vector<const std::byte*> srcs;
  for (size_t i = 0; i < metas.size(); ++i) srcs.push_back(data.data() + i * kBlock);
  const std::vector<absl::Status> results = tier->PutBlocks(metas, srcs);
  // Pieces {1, 2, 10, 11}, {12..15}, {16..19}: 1 and 2 present, 10 and 11 take the free slots,
  // 12 and 13 those of 10 and 11, 16 and 17 those of 12 and 13.
  const std::vector<uint64_t> refused = {14, 15, 18, 19};
  ASSERT_EQ(results.size(), metas.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    const bool want_refused =
        std::find(refused.begin(), refused.end(), metas[i].hash) != refused.end();
    if (want_refused) {
      EXPECT_TRUE(absl::IsResourceExhausted(results[i])) << metas[i].hash << ": " << results[i];
    } else {
      EXPECT_TRUE(results[i].ok()) << metas[i].hash << ": " << results[i];
    }
  }
  tier->Flush();
  EXPECT_EQ(tier->stats().rejected, 4);
  EXPECT_EQ(tier->stats().puts, 4 + 6);  // the first run, then 10..13, 16, 17
  for (uint64_t h : {1, 2, 3, 4, 16, 17}) EXPECT_TRUE(tier->Contains(h)) << h;
  for (uint64_t h : {10, 11, 12, 13, 14, 15, 18, 19}) EXPECT_FALSE(tier->Contains(h)) << h;
  ExpectStored(*tier, std::vector<BlockMeta>{{.hash = 16}, {.hash = 17}});
}

// Stands between a client and a real daemon, passing every call through, except that the
// `poisoned`-th ReserveWrite (1-based) is answered with slots outside the daemon's pool: the
// transfer of that piece is refused before anything moves, as if the daemon were gone.
class PoisoningProxy final : public v1::KvStore::Service {
 public:
  PoisoningProxy(const std::string& daemon, int poisoned)
      : stub_(v1::KvStore::NewStub(proto::MakeChannel(daemon))), poisoned_(poisoned) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
  }
  ~PoisoningProxy() override { server_->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int reserve_writes() const { return reserve_writes_.load(); }

  grpc::Status Hello(grpc::ServerContext*, const v1::KvHelloRequest* q,
                     v1::KvHelloResponse* r) override {
    return Forward(&v1::KvStore::Stub::Hello, q, r);
  }
  grpc::Status Lookup(grpc::ServerContext*, const v1::KvLookupRequest* q,
                      v1::KvLookupResponse* r) override {
    return Forward(&v1::KvStore::Stub::Lookup, q, r);
  }
  grpc::Status ReserveWrite(grpc::ServerContext*, const v1::KvReserveWriteRequest* q,
                            v1::KvReserveWriteResponse* r) override {
    grpc::Status s = Forward(&v1::KvStore::Stub::ReserveWrite, q, r);
    if (++reserve_writes_ == poisoned_) {
      for (v1::KvReservation& res : *r->mutable_reservations()) res.set_offset(uint64_t{1} << 50);
    }
    return s;
  }
  grpc::Status Acquire(grpc::ServerContext*, const v1::KvAcquireRequest* q,
                       v1::KvAcquireResponse* r) override {
    return Forward(&v1::KvStore::Stub::Acquire, q, r);
  }
  grpc::Status Settle(grpc::ServerContext*, const v1::KvSettleRequest* q,
                      v1::KvSettleResponse* r) override {
    return Forward(&v1::KvStore::Stub::Settle, q, r);
  }
  grpc::Status Erase(grpc::ServerContext*, const v1::KvEraseRequest* q,
                     v1::KvEraseResponse* r) override {
    return Forward(&v1::KvStore::Stub::Erase, q, r);
  }
  grpc::Status Stats(grpc::ServerContext*, const v1::KvStatsRequest* q,
                     v1::KvStatsResponse* r) override {
    return Forward(&v1::KvStore::Stub::Stats, q, r);
  }

 private:
  template <typename Req, typename Resp>
  grpc::Status Forward(grpc::Status (v1::KvStore::Stub::*rpc)(grpc::ClientContext*, const Req&,
                                                              Resp*),
                       const Req* q, Resp* r) {
    grpc::ClientContext ctx;
    return (stub_.get()->*rpc)(&ctx, *q, r);
  }

  std::unique_ptr<v1::KvStore::Stub> stub_;
  const int poisoned_;
  std::atomic<int> reserve_writes_{0};
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// Two daemons, the first behind a proxy that poisons its second ReserveWrite: the second piece
// to that daemon fails (InvalidArgument) while the pieces before and after it, to both daemons,
// are stored: its blocks get its error, its slots are given back (aborted), the daemon is
// reconnected for the next piece, and the run returns the error. Per block exactly as before
// puts were pipelined.
TEST(RemotePipelineTest, FailedPieceMidRunFailsOnlyItsBlocks) {
  auto a = StartServer("kvs-pipe-a", 64);
  auto b = StartServer("kvs-pipe-b", 64);
  PoisoningProxy proxy(a->address(), /*poisoned=*/2);
  auto tier = Connect({proxy.address(), b->address()}, /*lanes=*/2, /*lane_blocks=*/4);
  const auto metas = Chain(1, 48);
  std::vector<int> on_a;  // indexes into metas of the blocks on the proxied daemon, in order
  for (int i = 0; i < 48; ++i) {
    if (tier->DaemonFor(metas[i].hash) == 0) on_a.push_back(i);
  }
  ASSERT_GE(on_a.size(), 12u) << "the proxied daemon needs three pieces";
  ASSERT_LE(on_a.size(), 40u) << "the other daemon needs two pieces";
  const auto data = RunData(metas);
  std::vector<const std::byte*> srcs;
  for (int i = 0; i < 48; ++i) srcs.push_back(data.data() + size_t(i) * kBlock);

  const std::vector<absl::Status> results = tier->PutBlocks(metas, srcs);
  std::vector<bool> failed(48, false);
  for (size_t k = 4; k < 8; ++k) failed[on_a[k]] = true;  // the second piece to daemon 0
  for (int i = 0; i < 48; ++i) {
    if (failed[i]) {
      EXPECT_TRUE(absl::IsInvalidArgument(results[i])) << metas[i].hash << ": " << results[i];
    } else {
      EXPECT_TRUE(results[i].ok()) << metas[i].hash << ": " << results[i];
    }
  }
  tier->Flush();
  EXPECT_EQ(tier->stats().rejected, 4);
  EXPECT_EQ(tier->stats().puts, 48 - 4);
  std::vector<BlockMeta> stored;
  for (int i = 0; i < 48; ++i) {
    EXPECT_EQ(tier->Contains(metas[i].hash), !failed[i]) << metas[i].hash;
    if (!failed[i]) stored.push_back(metas[i]);
  }
  ExpectStored(*tier, stored);
  // The aborted slots went back: the daemon holds exactly the stored blocks.
  auto direct_a = testing::ConnectTestTier({a->address()}, kBlock);
  EXPECT_EQ(direct_a->usage().blocks, static_cast<int64_t>(on_a.size()) - 4);

  // PutRun reports the first error, and a retry stores the failed piece.
  PoisoningProxy again(a->address(), /*poisoned=*/1);
  auto tier2 = Connect({again.address(), b->address()}, /*lanes=*/2, /*lane_blocks=*/4);
  const auto more = Chain(1000, 16);
  ASSERT_TRUE(std::any_of(more.begin(), more.end(),
                          [&](const BlockMeta& m) { return tier2->DaemonFor(m.hash) == 0; }));
  const absl::Status s = tier2->PutRun(more, RunData(more));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ASSERT_TRUE(tier2->PutRun(more, RunData(more)).ok());
  ExpectStored(*tier2, more);
}

}  // namespace
}  // namespace strata::kvstore
