// The router's worker pool and placement, without processes: registration rules, heartbeats
// feeding the KV index, expiry, and each policy's choices, 429 and 503.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "strata/router/placement.h"
#include "strata/router/worker_pool.h"

namespace strata::router {
namespace {

v1::WorkerInfo Info(const std::string& id, v1::Role role, const std::string& identity = "m1") {
  v1::WorkerInfo w;
  w.set_id(id);
  w.set_role(role);
  w.set_grpc_address("127.0.0.1:1");
  w.set_model_identity(identity);
  w.set_block_size(16);
  return w;
}

v1::HeartbeatRequest Beat(const std::string& id, uint64_t epoch, int running,
                          std::vector<uint64_t> stored = {}) {
  v1::HeartbeatRequest h;
  h.set_worker_id(id);
  h.set_epoch(epoch);
  h.mutable_load()->set_running(running);
  uint64_t parent = 0;
  for (uint64_t hash : stored) {
    auto* e = h.add_events();
    e->set_kind(v1::KvEvent::STORED);
    e->set_hash(hash);
    e->set_parent_hash(parent);
    parent = hash;
  }
  return h;
}

TEST(WorkerPoolTest, RegistrationRejectsForeignModelsAndBlockSizes) {
  WorkerPool pool;
  ASSERT_TRUE(pool.Register(Info("d0", v1::ROLE_DECODE)).ok());
  EXPECT_EQ(pool.Register(Info("d1", v1::ROLE_DECODE, "m2")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::WorkerInfo bs = Info("d2", v1::ROLE_DECODE);
  bs.set_block_size(32);
  EXPECT_EQ(pool.Register(bs).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Register(Info("", v1::ROLE_DECODE)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Register(Info("x", v1::ROLE_UNSPECIFIED)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.num_workers(), 1);
}

// With profiles required (the goodput router), a worker must match one: a GPU worker with only
// CPU profiles is refused with the reason; a matching worker's view carries its profile.
TEST(WorkerPoolTest, RegistrationMatchesEachWorkerWithAProfile) {
  WorkerProfile cpu;
  cpu.name = "cpu-any";
  WorkerProfile h100;
  h100.name = "m-h100";
  h100.model = "m";
  h100.device = "cuda:NVIDIA H100";
  WorkerPool pool;
  pool.RequireProfiles({cpu});
  v1::WorkerInfo gpu = Info("d0", v1::ROLE_DECODE);
  gpu.set_model("m");
  gpu.set_device("cuda:NVIDIA H100 80GB HBM3");
  auto refused = pool.Register(gpu);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("worker d0: no goodput profile for model 'm' on device "
                                   "'cuda:NVIDIA H100 80GB HBM3'"));
  EXPECT_EQ(pool.num_workers(), 0);
  pool.RequireProfiles({cpu, h100});
  ASSERT_TRUE(pool.Register(gpu).ok());
  v1::WorkerInfo host = Info("d1", v1::ROLE_DECODE);
  host.set_model("m");
  host.set_device("cpu:Intel Xeon (2 threads)");
  ASSERT_TRUE(pool.Register(host).ok());
  v1::WorkerInfo kvstore = Info("kv0", v1::ROLE_KVSTORE);
  kvstore.set_device("anything");
  ASSERT_TRUE(pool.Register(kvstore).ok());
  std::map<std::string, std::string> got;
  for (const WorkerView& v : pool.Snapshot()) got[v.id] = v.profile ? v.profile->name : "none";
  EXPECT_EQ(got["d0"], "m-h100");
  EXPECT_EQ(got["d1"], "cpu-any");
  EXPECT_EQ(got["kv0"], "none");
}

TEST(WorkerPoolTest, RegistrationRefusesWorkersKeyedWithAnotherKey) {
  auto key = BlockHashKey::FromBytes("the cluster's block hash key");
  auto other = BlockHashKey::FromBytes("another cluster's block hash key");
  ASSERT_TRUE(key.ok() && other.ok());
  WorkerPool pool(absl::Seconds(3), *key);
  v1::WorkerInfo good = Info("d0", v1::ROLE_DECODE);
  good.set_kv_hash_key_fingerprint((*key)->fingerprint());
  ASSERT_TRUE(pool.Register(good).ok());
  v1::WorkerInfo wrong = Info("d1", v1::ROLE_DECODE);
  wrong.set_kv_hash_key_fingerprint((*other)->fingerprint());
  auto refused = pool.Register(wrong);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("worker d1 keys its block hashes with another KV hash key"));
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr((*other)->fingerprint()));
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("--kv-hash-key-file"));
  // A worker without a key is refused by a keyed router, and the reverse.
  auto unkeyed = pool.Register(Info("d2", v1::ROLE_PREFILL));
  EXPECT_THAT(unkeyed.status().message(), ::testing::HasSubstr("fingerprint none"));
  WorkerPool plain;
  EXPECT_EQ(plain.Register(good).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(plain.Register(Info("d3", v1::ROLE_DECODE)).ok());
  // kvstore daemons never hash: no key needed.
  EXPECT_TRUE(pool.Register(Info("kv0", v1::ROLE_KVSTORE)).ok());
  EXPECT_EQ(pool.num_workers(), 2);
  // The router hashes prompts as its workers do: the key and the request's salt.
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const BlockHasher workers(BlockHashSeed("m1"), *key);
  EXPECT_EQ(pool.Hasher("").Chain(prompt, 4), workers.Chain(prompt, 4));
  EXPECT_EQ(pool.Hasher("t").Chain(prompt, 4), workers.Salted("t").Chain(prompt, 4));
  EXPECT_EQ(plain.Hasher("").Chain(prompt, 4), HashBlockChain(BlockHashSeed("m1"), prompt, 4));
}

v1::KvLayout Layout(const std::string& dtype, const std::string& memory) {
  v1::KvLayout l;
  l.set_dtype(dtype);
  l.set_block_size(16);
  l.set_num_layers(32);
  l.set_num_kv_heads(8);
  l.set_head_dim(128);
  l.set_memory(memory);
  return l;
}

TEST(WorkerPoolTest, PrefillAndDecodeWorkersMustShareOneKvLayout) {
  WorkerPool pool;
  v1::WorkerInfo p0 = Info("p0", v1::ROLE_PREFILL);
  *p0.mutable_kv_layout() = Layout("bf16", "device");
  ASSERT_TRUE(pool.Register(p0).ok());
  v1::WorkerInfo d0 = Info("d0", v1::ROLE_DECODE);
  *d0.mutable_kv_layout() = Layout("f32", "host");
  auto refused = pool.Register(d0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("worker d0's KV pool (f32 KV, 16 tokens/block, 32 layers x 8 "
                                   "KV heads x 128, host memory) does not match"));
  *d0.mutable_kv_layout() = Layout("bf16", "device");
  EXPECT_TRUE(pool.Register(d0).ok());
  // A mixed worker never hands blocks over: its pool may differ.
  v1::WorkerInfo m0 = Info("m0", v1::ROLE_MIXED);
  *m0.mutable_kv_layout() = Layout("f32", "host");
  EXPECT_TRUE(pool.Register(m0).ok());
}

TEST(WorkerPoolTest, HeartbeatsFeedTheIndexAndUnknownWorkersMustReregister) {
  WorkerPool pool;
  const uint64_t epoch = *pool.Register(Info("d0", v1::ROLE_DECODE));
  ASSERT_TRUE(pool.Heartbeat(Beat("d0", epoch, 3, {11, 12, 13})).ok());
  std::vector<BlockHash> chain = {11, 12, 13, 14};
  auto m = pool.MatchPrefix(chain);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].blocks, 3);
  EXPECT_EQ(pool.Snapshot()[0].load.running, 3);
  EXPECT_EQ(pool.Heartbeat(Beat("ghost", epoch, 0)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pool.Heartbeat(Beat("d0", epoch + 1, 0)).code(), absl::StatusCode::kNotFound);
  pool.Remove("d0", "test");
  EXPECT_TRUE(pool.MatchPrefix(chain).empty());
}

TEST(WorkerPoolTest, SilentWorkersExpire) {
  WorkerPool pool(absl::Milliseconds(50));
  ASSERT_TRUE(pool.Register(Info("d0", v1::ROLE_DECODE)).ok());
  EXPECT_TRUE(pool.ExpireStale().empty());
  absl::SleepFor(absl::Milliseconds(80));
  EXPECT_EQ(pool.ExpireStale(), std::vector<std::string>{"d0"});
  EXPECT_EQ(pool.num_workers(), 0);
}

v1::WorkerInfo ModelWorker(const std::string& id, v1::Role role, const std::string& model,
                           const std::string& identity) {
  v1::WorkerInfo w = Info(id, role, identity);
  w.set_model(model);
  return w;
}

// Two served models: each worker joins its model's pool, and a pool sees only its own workers
// and its own KV index, even for blocks both pools hold under the same hash.
TEST(WorkerPoolTest, SeveralModelsKeepSeparatePoolsAndIndices) {
  WorkerPool pool;
  ASSERT_TRUE(pool.ServeModels({"llama", "qwen"}).ok());
  const uint64_t epoch = *pool.Register(ModelWorker("l-d0", v1::ROLE_DECODE, "llama", "id-l"));
  ASSERT_TRUE(pool.Register(ModelWorker("l-p0", v1::ROLE_PREFILL, "llama", "id-l")).ok());
  v1::WorkerInfo q = ModelWorker("q-d0", v1::ROLE_DECODE, "qwen", "id-q");
  q.set_block_size(32);  // another model's block size: its own pool's to fix
  ASSERT_TRUE(pool.Register(q).ok());
  auto ids = [](const std::vector<WorkerView>& views) {
    std::vector<std::string> out;
    for (const WorkerView& v : views) out.push_back(v.id);
    return out;
  };
  EXPECT_THAT(ids(pool.SnapshotModel("llama")), ::testing::ElementsAre("l-d0", "l-p0"));
  EXPECT_THAT(ids(pool.SnapshotModel("qwen")), ::testing::ElementsAre("q-d0"));
  EXPECT_TRUE(pool.SnapshotModel("mistral").empty());
  EXPECT_EQ(pool.Snapshot().size(), 3u);
  EXPECT_EQ(pool.block_size("llama"), 16);
  EXPECT_EQ(pool.block_size("qwen"), 32);
  EXPECT_EQ(pool.model_identity("qwen"), "id-q");
  EXPECT_TRUE(pool.Serves("qwen"));
  EXPECT_FALSE(pool.Serves("mistral"));
  // The same block hashes reported by both models' workers land in separate indices.
  ASSERT_TRUE(pool.Heartbeat(Beat("l-d0", epoch, 0, {7, 8, 9})).ok());
  ASSERT_TRUE(pool.Heartbeat(Beat("q-d0", epoch, 0, {7, 8})).ok());
  const std::vector<BlockHash> chain = {7, 8, 9};
  auto llama = pool.MatchPrefix(chain, "llama");
  ASSERT_EQ(llama.size(), 1u);
  EXPECT_EQ(llama[0].blocks, 3);
  auto qwen = pool.MatchPrefix(chain, "qwen");
  ASSERT_EQ(qwen.size(), 1u);
  EXPECT_EQ(qwen[0].blocks, 2);
  EXPECT_NE(llama[0].worker, qwen[0].worker);
  EXPECT_TRUE(pool.MatchPrefix(chain, "mistral").empty());
  EXPECT_EQ(pool.num_index_blocks("llama"), 3);
  EXPECT_EQ(pool.num_index_blocks("qwen"), 2);
  EXPECT_EQ(pool.num_index_blocks(), 5);
  // Each model hashes prompts with its own identity's seed.
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  EXPECT_EQ(pool.Hasher("", "llama").Chain(prompt, 4),
            HashBlockChain(BlockHashSeed("id-l"), prompt, 4));
  EXPECT_EQ(pool.Hasher("", "qwen").Chain(prompt, 4),
            HashBlockChain(BlockHashSeed("id-q"), prompt, 4));
  // Removing a worker empties only its model's index.
  pool.Remove("q-d0", "test");
  EXPECT_TRUE(pool.MatchPrefix(chain, "qwen").empty());
  EXPECT_EQ(pool.MatchPrefix(chain, "llama").size(), 1u);
}

TEST(WorkerPoolTest, SeveralModelsRefuseWorkersOfModelsNotServedOrOfAnotherIdentity) {
  WorkerPool pool;
  ASSERT_TRUE(pool.ServeModels({"llama", "qwen"}).ok());
  auto unknown = pool.Register(ModelWorker("m-d0", v1::ROLE_DECODE, "mistral", "id-m"));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unknown.status().message(),
              ::testing::HasSubstr("serves model 'mistral', which this router does not serve "
                                   "(it serves llama, qwen)"));
  ASSERT_TRUE(pool.Register(ModelWorker("l-d0", v1::ROLE_DECODE, "llama", "id-l")).ok());
  // A worker naming llama with qwen's weights is refused: llama's identity is fixed.
  EXPECT_EQ(pool.Register(ModelWorker("l-d1", v1::ROLE_DECODE, "llama", "id-q")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(pool.Register(ModelWorker("q-d0", v1::ROLE_DECODE, "qwen", "id-q")).ok());
  // A kvstore daemon without an identity serves every model; one with an identity only its.
  ASSERT_TRUE(pool.Register(Info("kv-any", v1::ROLE_KVSTORE, "")).ok());
  ASSERT_TRUE(pool.Register(Info("kv-q", v1::ROLE_KVSTORE, "id-q")).ok());
  EXPECT_EQ(pool.Register(Info("kv-x", v1::ROLE_KVSTORE, "id-x")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto ids = [](const std::vector<WorkerView>& views) {
    std::vector<std::string> out;
    for (const WorkerView& v : views) out.push_back(v.id);
    return out;
  };
  EXPECT_THAT(ids(pool.SnapshotModel("llama")), ::testing::ElementsAre("kv-any", "l-d0"));
  EXPECT_THAT(ids(pool.SnapshotModel("qwen")), ::testing::ElementsAre("kv-any", "kv-q", "q-d0"));
  // Served models are fixed before workers register.
  EXPECT_EQ(pool.ServeModels({"other"}).code(), absl::StatusCode::kFailedPrecondition);
  WorkerPool fresh;
  EXPECT_EQ(fresh.ServeModels({"a", "a"}).code(), absl::StatusCode::kInvalidArgument);
}

// Each model's workers are matched against that model's profiles when it has its own.
TEST(WorkerPoolTest, SeveralModelsMatchWorkersWithTheirModelsProfiles) {
  WorkerProfile shared;
  shared.name = "shared";
  WorkerProfile qwen_only;
  qwen_only.name = "qwen-h100";
  qwen_only.model = "qwen";
  qwen_only.device = "cuda:NVIDIA H100";
  WorkerPool pool;
  ASSERT_TRUE(pool.ServeModels({"llama", "qwen"}).ok());
  pool.RequireProfiles({shared});
  pool.RequireProfiles({qwen_only}, "qwen");
  v1::WorkerInfo l = ModelWorker("l-d0", v1::ROLE_DECODE, "llama", "id-l");
  l.set_device("cpu:Intel Xeon");
  ASSERT_TRUE(pool.Register(l).ok());
  v1::WorkerInfo q_cpu = ModelWorker("q-d0", v1::ROLE_DECODE, "qwen", "id-q");
  q_cpu.set_device("cpu:Intel Xeon");
  EXPECT_EQ(pool.Register(q_cpu).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::WorkerInfo q_gpu = ModelWorker("q-d1", v1::ROLE_DECODE, "qwen", "id-q");
  q_gpu.set_device("cuda:NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(pool.Register(q_gpu).ok());
  std::map<std::string, std::string> got;
  for (const WorkerView& v : pool.Snapshot()) got[v.id] = v.profile ? v.profile->name : "none";
  EXPECT_EQ(got["l-d0"], "shared");
  EXPECT_EQ(got["q-d1"], "qwen-h100");
}

// Placement over one model's snapshot and index never picks another model's worker, however
// much lighter or better cached that worker is.
TEST(WorkerPoolTest, PlacementOfAModelNeverPicksAnotherModelsWorker) {
  WorkerPool pool;
  ASSERT_TRUE(pool.ServeModels({"llama", "qwen"}).ok());
  const uint64_t epoch = *pool.Register(ModelWorker("l-d0", v1::ROLE_DECODE, "llama", "id-l"));
  ASSERT_TRUE(pool.Register(ModelWorker("q-d0", v1::ROLE_DECODE, "qwen", "id-q")).ok());
  // llama's worker is busy; qwen's is idle and holds the whole prompt under the same hashes.
  ASSERT_TRUE(pool.Heartbeat(Beat("l-d0", epoch, 50)).ok());
  ASSERT_TRUE(pool.Heartbeat(Beat("q-d0", epoch, 0, {1, 2, 3, 4})).ok());
  for (const std::string policy : {"kv-aware", "least-loaded", "round-robin", "kv-cost"}) {
    PlacementOptions o;
    o.policy = policy;
    auto placer = Placer::Create(o);
    ASSERT_TRUE(placer.ok()) << placer.status();
    for (int i = 0; i < 4; ++i) {
      const std::vector<BlockHash> chain = {1, 2, 3, 4};
      auto placed = (*placer)->Place(pool.SnapshotModel("llama"), pool.MatchPrefix(chain, "llama"),
                                     64, 16, {});
      ASSERT_TRUE(placed.ok()) << policy << ": " << placed.status();
      EXPECT_EQ(placed->decode_id, "l-d0") << policy;
      EXPECT_TRUE(placed->prefill_id.empty() || placed->prefill_id.starts_with("l-")) << policy;
    }
  }
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    epoch_ = *pool_.Register(Info("p0", v1::ROLE_PREFILL));
    ASSERT_TRUE(pool_.Register(Info("d0", v1::ROLE_DECODE)).ok());
    ASSERT_TRUE(pool_.Register(Info("d1", v1::ROLE_DECODE)).ok());
  }
  Placement Place(Placer& p, int32_t prompt, std::vector<BlockHash> chain = {},
                  std::vector<std::string> exclude = {}) {
    auto r = p.Place(pool_.Snapshot(), pool_.MatchPrefix(chain), prompt, 16, exclude);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Placement{};
  }
  std::unique_ptr<Placer> Make(const std::string& policy, int max_inflight = 256) {
    PlacementOptions o;
    o.policy = policy;
    o.max_inflight_per_worker = max_inflight;
    return *Placer::Create(o);
  }
  WorkerPool pool_;
  uint64_t epoch_ = 0;
};

TEST_F(PlacementTest, LeastLoadedPicksTheLightestDecodeWorker) {
  ASSERT_TRUE(pool_.Heartbeat(Beat("d0", epoch_, 5)).ok());
  ASSERT_TRUE(pool_.Heartbeat(Beat("d1", epoch_, 1)).ok());
  auto placer = Make("least-loaded");
  Placement p = Place(*placer, 100);
  EXPECT_EQ(p.decode_id, "d1");
  EXPECT_EQ(p.prefill_id, "p0");
  pool_.AddInflight("d1", 10);  // the router's own count reacts before the next heartbeat
  EXPECT_EQ(Place(*placer, 100).decode_id, "d0");
}

TEST_F(PlacementTest, KvAwarePrefersTheCachedPrefixAndPrefillsShortRemaindersLocally) {
  ASSERT_TRUE(pool_.Heartbeat(Beat("d1", epoch_, 0, {1, 2, 3})).ok());
  auto placer = Make("kv-aware");
  Placement p = Place(*placer, 56, {1, 2, 3});
  EXPECT_EQ(p.decode_id, "d1");
  EXPECT_EQ(p.cached_blocks, 3);
  EXPECT_TRUE(p.prefill_id.empty()) << "8 uncached tokens should prefill on the decode worker";
  p = Place(*placer, 200, {1, 2, 3});
  EXPECT_EQ(p.prefill_id, "p0");
  EXPECT_EQ(p.prefill_address, "127.0.0.1:1");
}

TEST_F(PlacementTest, RoundRobinAlternatesAndExclusionsAreHonored) {
  auto placer = Make("round-robin");
  const std::string a = Place(*placer, 10).decode_id, b = Place(*placer, 10).decode_id;
  EXPECT_NE(a, b);
  EXPECT_EQ(Place(*placer, 10, {}, {"d0"}).decode_id, "d1");
}

TEST_F(PlacementTest, OverloadIs429AndNoDecodeWorkerIs503) {
  auto placer = Make("least-loaded", /*max_inflight=*/2);
  pool_.AddInflight("d0", 2);
  pool_.AddInflight("d1", 2);
  auto r = placer->Place(pool_.Snapshot(), {}, 10, 16, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  r = placer->Place(pool_.Snapshot(), {}, 10, 16, {"d0", "d1"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(Placer::Create({.policy = "random"}).ok());
}

TEST_F(PlacementTest, AStalledWorkerGetsNothingUntilItProgressesAgain) {
  // d1 holds the prompt's prefix, so kv-aware would pick it, but its engine is stalled.
  v1::HeartbeatRequest stalled = Beat("d1", epoch_, 0, {1, 2, 3});
  stalled.mutable_load()->set_stalled(true);
  stalled.mutable_load()->set_stalled_seconds(42);
  ASSERT_TRUE(pool_.Heartbeat(stalled).ok());
  EXPECT_TRUE(pool_.Snapshot()[1].load.stalled);
  EXPECT_EQ(pool_.Snapshot()[1].load.stalled_seconds, 42);
  auto placer = Make("kv-aware");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Place(*placer, 56, {1, 2, 3}).decode_id, "d0");
  // Only the stalled one left: no decode worker is available (503), not a full one (429).
  auto r = placer->Place(pool_.Snapshot(), {}, 10, 16, {"d0"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  // Its next heartbeat says it progresses again: placed there once more.
  ASSERT_TRUE(pool_.Heartbeat(Beat("d1", epoch_, 0)).ok());
  EXPECT_EQ(Place(*placer, 56, {1, 2, 3}).decode_id, "d1");
}

}  // namespace
}  // namespace strata::router
