// G4's registered-buffer path: a RemoteTier caller registers long-lived memory once and its
// puts/gets move blocks straight between that memory and the daemon's pool (no staging copy).
// Real KvStoreServers over gRPC + UCX on loopback, in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

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

std::unique_ptr<KvStoreServer> StartServer(const std::string& id, int64_t capacity_blocks) {
  return testing::StartTestServer(id, capacity_blocks * int64_t{kBlock}, kBlock);
}

std::unique_ptr<RemoteTier> Connect(std::vector<std::string> daemons) {
  return testing::ConnectTestTier(std::move(daemons), kBlock);
}

// `n` blocks back to back, block i with contents MakeBlock(kBlock, first + i).
void FillRun(std::byte* dst, uint64_t first, int n) {
  for (int i = 0; i < n; ++i) {
    const auto b = MakeBlock(kBlock, first + uint64_t(i));
    std::memcpy(dst + size_t(i) * kBlock, b.data(), kBlock);
  }
}

std::vector<BlockMeta> Metas(uint64_t first, int n) {
  std::vector<BlockMeta> m;
  for (int i = 0; i < n; ++i) m.push_back({.hash = first + uint64_t(i), .parent = 0});
  return m;
}

std::vector<BlockHash> Hashes(uint64_t first, int n) {
  std::vector<BlockHash> h;
  for (int i = 0; i < n; ++i) h.push_back(first + uint64_t(i));
  return h;
}

// A run longer than the staging buffer (16 blocks) moves in one direct piece each way, every
// block byte-exact, and the counters say no block went through staging.
TEST(RemoteRegisteredTest, RunsMoveDirectlyAndByteExact) {
  auto server = StartServer("kvs-reg", 64);
  auto tier = Connect({server->address()});
  ASSERT_EQ(tier->connected_daemons(), 1);
  constexpr int kRun = 40;
  std::vector<std::byte> memory(2 * kRun * kBlock);
  auto handle = tier->RegisterRegion(memory.data(), memory.size());
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::byte* src = memory.data();
  std::byte* dst = memory.data() + kRun * kBlock;
  FillRun(src, 100, kRun);
  ASSERT_TRUE(tier->PutRun(Metas(100, kRun), {src, kRun * kBlock}).ok());
  auto n = tier->GetRun(Hashes(100, kRun), {dst, kRun * kBlock});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kRun);
  EXPECT_EQ(std::memcmp(src, dst, kRun * kBlock), 0);
  // Single-block Put/Get inside the region are direct too.
  FillRun(src, 900, 1);
  ASSERT_TRUE(tier->Put({.hash = 900}, {src, kBlock}).ok());
  ASSERT_TRUE(tier->Get(900, {dst, kBlock}).ok());
  EXPECT_EQ(std::memcmp(src, dst, kBlock), 0);
  const RemotePathStats p = tier->path_stats();
  EXPECT_EQ(p.direct_blocks, 2 * kRun + 2);
  EXPECT_EQ(p.staged_blocks, 0);
  EXPECT_EQ(tier->stats().puts, kRun + 1);
  EXPECT_EQ(tier->stats().hits, kRun + 1);
  ASSERT_TRUE(tier->UnregisterRegion(*handle).ok());
}

// Memory outside every registered region (or straddling its end) goes through staging; both
// paths read each other's blocks.
TEST(RemoteRegisteredTest, UnregisteredMemoryFallsBackToStaging) {
  auto server = StartServer("kvs-fallback", 64);
  auto tier = Connect({server->address()});
  constexpr int kRun = 4;
  std::vector<std::byte> memory((kRun + 1) * kBlock);  // the last block is not registered
  auto handle = tier->RegisterRegion(memory.data(), kRun * kBlock);
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<std::byte> heap(kRun * kBlock);
  FillRun(heap.data(), 10, kRun);
  ASSERT_TRUE(tier->PutRun(Metas(10, kRun), heap).ok());  // staged
  EXPECT_EQ(tier->path_stats().staged_blocks, kRun);
  auto n = tier->GetRun(Hashes(10, kRun), {memory.data(), kRun * kBlock});  // direct
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, kRun);
  EXPECT_TRUE(std::equal(heap.begin(), heap.end(), memory.begin()));
  EXPECT_EQ(tier->path_stats().direct_blocks, kRun);
  // A buffer that starts inside the region but ends past it is not registered as a whole.
  std::vector<std::byte> expect(heap.begin() + 2 * kBlock, heap.end());
  std::fill(memory.begin(), memory.end(), std::byte{0});
  n = tier->GetRun(Hashes(12, 2), {memory.data() + (kRun - 1) * kBlock, 2 * kBlock});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), memory.begin() + (kRun - 1) * kBlock));
  EXPECT_EQ(tier->path_stats().staged_blocks, kRun + 2);
  ASSERT_TRUE(tier->UnregisterRegion(*handle).ok());
  // After unregistering, the same memory is staged.
  ASSERT_TRUE(tier->Get(12, {memory.data(), kBlock}).ok());
  EXPECT_EQ(tier->path_stats().staged_blocks, kRun + 3);
  EXPECT_EQ(tier->path_stats().direct_blocks, kRun);
}

TEST(RemoteRegisteredTest, RegistrationChecks) {
  auto server = StartServer("kvs-regchk", 8);
  auto tier = Connect({server->address()});
  std::vector<std::byte> memory(4 * kBlock);
  EXPECT_TRUE(absl::IsInvalidArgument(tier->RegisterRegion(nullptr, kBlock).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(tier->RegisterRegion(memory.data(), 0).status()));
  auto a = tier->RegisterRegion(memory.data(), 2 * kBlock);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(absl::IsInvalidArgument(
      tier->RegisterRegion(memory.data() + kBlock, 2 * kBlock).status()))
      << "overlap must be refused";
  auto b = tier->RegisterRegion(memory.data() + 2 * kBlock, 2 * kBlock);  // adjacent: fine
  ASSERT_TRUE(b.ok()) << b.status();
  // A run across both regions lies in neither as a whole: staged, still correct.
  FillRun(memory.data() + kBlock, 50, 2);
  ASSERT_TRUE(tier->PutRun(Metas(50, 2), {memory.data() + kBlock, 2 * kBlock}).ok());
  EXPECT_EQ(tier->path_stats().staged_blocks, 2);
  EXPECT_TRUE(tier->UnregisterRegion(*a).ok());
  EXPECT_TRUE(absl::IsNotFound(tier->UnregisterRegion(*a)));
  EXPECT_TRUE(tier->UnregisterRegion(*b).ok());
}

// Checksums are still verified on a direct read: a corrupt copy is a miss (DataLoss), counted,
// dropped on the daemon, and the run stops before it.
TEST(RemoteRegisteredTest, CorruptCopyReadInPlaceIsAMiss) {
  auto server = StartServer("kvs-regcorrupt", 16);
  auto tier = Connect({server->address()});
  constexpr int kRun = 4;
  std::vector<std::byte> memory(2 * kRun * kBlock);
  ASSERT_TRUE(tier->RegisterRegion(memory.data(), memory.size()).ok());
  FillRun(memory.data(), 70, kRun);
  ASSERT_TRUE(tier->PutRun(Metas(70, kRun), {memory.data(), kRun * kBlock}).ok());
  tier->Flush();  // the daemon publishes the blocks once it has the commits
  ASSERT_TRUE(server->CorruptBlockForTest(72).ok());
  std::byte* dst = memory.data() + kRun * kBlock;
  auto n = tier->GetRun(Hashes(70, kRun), {dst, kRun * kBlock});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2) << "the run must stop at the corrupt block";
  EXPECT_EQ(std::memcmp(memory.data(), dst, 2 * kBlock), 0);
  EXPECT_EQ(tier->stats().checksum_failures, 1);
  EXPECT_EQ(tier->stats().misses, 1);
  EXPECT_FALSE(tier->Contains(72));
  EXPECT_TRUE(tier->Contains(73));
  const absl::Status s = tier->Get(72, {dst, kBlock});
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

// Leases `hashes` on the daemon and never releases them (a reader that died).
void LeaseForever(const std::string& address, std::vector<uint64_t> hashes) {
  testing::RawKvClient raw(address);
  v1::KvHelloResponse hello;
  ASSERT_TRUE(raw.Hello(kBlock, &hello).ok());
  v1::KvAcquireResponse resp;
  ASSERT_TRUE(raw.Acquire(hello.instance(), std::move(hashes), &resp).ok());
}

// PutBlocks stores scattered blocks (a batch of demotions) and answers per block: stored and
// already present are OK, a block the daemon has no room for is ResourceExhausted, and only
// that one is missing afterwards. Sources in one registered region go direct.
TEST(RemoteRegisteredTest, PutBlocksAnswersPerBlock) {
  auto server = StartServer("kvs-putblocks", 4);
  auto tier = Connect({server->address()});
  std::vector<std::vector<std::byte>> heap;
  for (uint64_t h = 1; h <= 3; ++h) heap.push_back(MakeBlock(kBlock, h));
  ASSERT_TRUE(tier->Put({.hash = 2}, heap[1]).ok());  // already present below
  tier->Flush();  // committed (its commit was owed) before another client leases it
  LeaseForever(server->address(), {2});
  const std::vector<BlockMeta> metas = {{.hash = 3}, {.hash = 2}, {.hash = 1}};
  const std::vector<const std::byte*> srcs = {heap[2].data(), heap[1].data(), heap[0].data()};
  std::vector<absl::Status> r = tier->PutBlocks(metas, srcs);
  ASSERT_EQ(r.size(), 3u);
  for (const absl::Status& s : r) EXPECT_TRUE(s.ok()) << s;
  for (uint64_t h = 1; h <= 3; ++h) {
    std::vector<std::byte> out(kBlock);
    ASSERT_TRUE(tier->Get(h, out).ok()) << h;
    EXPECT_EQ(out, heap[h - 1]) << h;
  }
  EXPECT_EQ(tier->path_stats().staged_blocks, 1 + 2 + 3);  // Put 2, PutBlocks 3 and 1, 3 Gets
  // Fill the pool's last slot and lease everything: the next block finds no room.
  std::vector<std::byte> memory(3 * kBlock);
  ASSERT_TRUE(tier->RegisterRegion(memory.data(), memory.size()).ok());
  FillRun(memory.data(), 10, 3);
  ASSERT_TRUE(tier->Put({.hash = 10}, {memory.data(), kBlock}).ok());
  tier->Flush();
  LeaseForever(server->address(), {1, 3, 10});
  const std::vector<BlockMeta> more = {{.hash = 11}, {.hash = 10}, {.hash = 12}};
  const std::vector<const std::byte*> in_region = {memory.data() + kBlock, memory.data(),
                                                   memory.data() + 2 * kBlock};
  r = tier->PutBlocks(more, in_region);
  EXPECT_TRUE(absl::IsResourceExhausted(r[0])) << r[0];
  EXPECT_TRUE(r[1].ok()) << r[1];  // present
  EXPECT_TRUE(absl::IsResourceExhausted(r[2])) << r[2];
  EXPECT_FALSE(tier->Contains(11));
  EXPECT_EQ(tier->path_stats().direct_blocks, 1);  // the Put of block 10
  EXPECT_EQ(tier->PutBlocks(more, {}).front().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kvstore
