// Routing policies on constructed clusters (plain WorkerViews, as `strata sim` builds them):
// kv-cost's arithmetic, goodput's conditional disaggregation by prompt length and cache, tier
// costs, admission control with a retry-after hint, SLO classes, the router's pending prefill
// ledger and the online TTFT correction, and the policy registry.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/router/placement.h"
#include "strata/router/placement_policy.h"

namespace strata::router {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

WorkerView View(WorkerId index_id, const std::string& id, WorkerRole role) {
  WorkerView w;
  w.index_id = index_id;
  w.id = id;
  w.role = role;
  w.grpc_address = id + ":1";
  return w;
}

void SetDecodeLoad(WorkerView& w, int running, int64_t context) {
  w.load.running = running;
  w.load.decode_context_tokens = context;
  w.inflight = running;
}

WorkerMatch Match(WorkerId w, int32_t blocks, std::array<int32_t, kNumTiers> tiers) {
  WorkerMatch m;
  m.worker = w;
  m.blocks = blocks;
  m.tier_blocks = tiers;
  return m;
}

// Round numbers: prefill 10 ms + 1 ms/token; decode 10 ms + 10 us/context token + 1 ms/seq;
// a block moves prefill->decode in 1 ms, from host in 0.1 ms, from disk in 10 ms.
WorkerProfile TestProfile() {
  WorkerProfile p;
  p.name = "test";
  p.block_size = 16;
  p.max_batch_tokens = 1024;
  p.max_running = 64;
  p.kv_block_bytes = 1'000'000;
  p.prefill = {0.01, 0.001, 0};
  p.decode = {0.01, 1e-5, 0.001};
  p.kv_transfer = {1e9, 0};
  p.tier_fetch[1] = {1e10, 0};
  p.tier_fetch[2] = {1e8, 0};
  p.tier_fetch[3] = {1e8, 0};
  return p;
}

std::unique_ptr<Placer> MakeGoodput(SloTargets slo, bool ledger = false) {
  PlacementOptions o;
  o.policy = "goodput";
  o.profile = TestProfile();
  o.slo = slo;
  o.slo_classes["relaxed"] = {100, 1};
  o.track_pending_prefill = ledger;
  auto placer = Placer::Create(o);
  EXPECT_TRUE(placer.ok()) << placer.status();
  return std::move(*placer);
}

PlacementRequest Request(int32_t prompt, int64_t max_tokens = 0, std::string slo_class = "") {
  PlacementRequest r;
  r.prompt_tokens = prompt;
  r.block_size = 16;
  r.max_tokens = max_tokens;
  r.slo_class = std::move(slo_class);
  return r;
}

TEST(PolicyRegistryTest, BuiltinsAndCustomPoliciesAreSelectedByName) {
  const auto names = PlacementPolicyNames();
  for (const char* n : {"round-robin", "least-loaded", "kv-aware", "kv-cost", "goodput"}) {
    EXPECT_THAT(names, Contains(n));
  }
  auto bad = Placer::Create({.policy = "nope"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("kv-cost"));

  // A policy that always picks the last decode worker.
  class Last final : public PlacementPolicy {
   public:
    absl::StatusOr<Placement> Place(const PlacementContext& ctx) override {
      return MakePlacement(*ctx.decode.back(), nullptr, ctx.matches);
    }
  };
  ASSERT_TRUE(RegisterPlacementPolicy("last", [](const PlacementOptions&) {
                return absl::StatusOr<std::unique_ptr<PlacementPolicy>>(std::make_unique<Last>());
              }).ok());
  EXPECT_EQ(RegisterPlacementPolicy("kv-cost", nullptr).code(), absl::StatusCode::kAlreadyExists);
  auto placer = Placer::Create({.policy = "last"});
  ASSERT_TRUE(placer.ok());
  std::vector<WorkerView> w = {View(1, "d0", WorkerRole::kDecode),
                               View(2, "d1", WorkerRole::kDecode)};
  EXPECT_EQ((*placer)->Place(w, {}, Request(10))->decode_id, "d1");
}

TEST(KvCostPolicyTest, OverlapWeightTradesCachedBlocksAgainstActiveLoad) {
  std::vector<WorkerView> w = {View(1, "d0", WorkerRole::kDecode),
                               View(2, "d1", WorkerRole::kDecode)};
  SetDecodeLoad(w[0], 2, 160);  // 10 active blocks
  const std::vector<WorkerMatch> m = {Match(1, 3, {3, 0, 0, 0})};
  // 64-token prompt = 4 blocks. weight 1: d0 = 1 + 10 = 11, d1 = 4 + 0 = 4.
  auto p1 = Placer::Create({.policy = "kv-cost"});
  EXPECT_EQ((*p1)->Place(w, m, Request(64))->decode_id, "d1");
  // weight 5: d0 = 5 + 10 = 15, d1 = 20 + 0 = 20.
  auto p5 = Placer::Create({.policy = "kv-cost", .overlap_weight = 5});
  Placement p = *(*p5)->Place(w, m, Request(64));
  EXPECT_EQ(p.decode_id, "d0");
  EXPECT_EQ(p.cached_blocks, 3);
  // Without a reported context, used KV blocks are the active load: d0 = 4 + 10 used.
  w[0].load.decode_context_tokens = 0;
  w[0].load.total_kv_blocks = 100;
  w[0].load.free_kv_blocks = 90;
  EXPECT_EQ((*p5)->Place(w, m, Request(64))->decode_id, "d0");
  w[0].load.free_kv_blocks = 80;  // 20 used: 5 + 20 = 25 > 20
  EXPECT_EQ((*p5)->Place(w, m, Request(64))->decode_id, "d1");
}

TEST(KvCostPolicyTest, PrefillPoolIsChosenByOverlapAndQueue) {
  std::vector<WorkerView> w = {View(1, "p0", WorkerRole::kPrefill),
                               View(2, "p1", WorkerRole::kPrefill),
                               View(3, "d0", WorkerRole::kDecode)};
  w[0].load.queued_prefill_tokens = 16 * 3;  // 3 blocks queued
  const std::vector<WorkerMatch> m = {Match(1, 2, {2, 0, 0, 0})};
  auto placer = Placer::Create({.policy = "kv-cost"});
  // 8-block prompt: p0 = 6 + 3 = 9, p1 = 8.
  EXPECT_EQ((*placer)->Place(w, m, Request(128))->prefill_id, "p1");
  const std::vector<WorkerMatch> m2 = {Match(1, 6, {6, 0, 0, 0})};  // p0 = 2 + 3 = 5
  EXPECT_EQ((*placer)->Place(w, m2, Request(128))->prefill_id, "p0");
}

class GoodputTest : public ::testing::Test {
 protected:
  // One prefill worker with a 200-token queue (0.2 s) and one decode worker running 4
  // sequences over 2,000 context tokens (each prefill step also carries their 24 ms of decode).
  void SetUp() override {
    workers_ = {View(1, "p0", WorkerRole::kPrefill), View(2, "d0", WorkerRole::kDecode)};
    workers_[0].load.queued_prefill_tokens = 200;
    SetDecodeLoad(workers_[1], 4, 2000);
  }
  std::vector<WorkerView> workers_;
};

TEST_F(GoodputTest, ConditionalDisaggregationFlipsWithPromptLength) {
  auto placer = MakeGoodput({2.0, 0.2});
  // 32 tokens: local TTFT 0.066 s beats remote 0.244 s (queue + transfer).
  Placement p = *placer->Place(workers_, {}, Request(32, 16));
  EXPECT_EQ(p.decode_id, "d0");
  EXPECT_TRUE(p.prefill_id.empty());
  EXPECT_NEAR(p.predicted_ttft_s, 0.01 + 0.032 + 0.024, 1e-9);
  EXPECT_EQ(p.prefill_tokens, 32);
  // 1,000 tokens: local would stall the batch 1.01 s over 16 output tokens (TPOT 0.108 s);
  // remote: TTFT 0.2 + 1.01 + 63 blocks x 1 ms, TPOT 0.045 s.
  p = *placer->Place(workers_, {}, Request(1000, 16));
  EXPECT_EQ(p.prefill_id, "p0");
  EXPECT_NEAR(p.predicted_ttft_s, 0.2 + 1.01 + 0.063, 1e-9);
  EXPECT_NEAR(p.predicted_tpot_s, 0.01 + 1e-5 * 3000 + 0.005, 1e-9);
}

TEST_F(GoodputTest, ACachedPrefixOnTheDecodeWorkerKeepsPrefillLocal) {
  auto placer = MakeGoodput({2.0, 0.2});
  // d0 holds 60 of the 63 blocks in G1: only 40 tokens to compute locally.
  const std::vector<WorkerMatch> m = {Match(2, 60, {60, 0, 0, 0})};
  Placement p = *placer->Place(workers_, m, Request(1000, 16));
  EXPECT_TRUE(p.prefill_id.empty());
  EXPECT_EQ(p.cached_blocks, 60);
  EXPECT_EQ(p.prefill_tokens, 40);
  EXPECT_NEAR(p.predicted_ttft_s, 0.01 + 0.040 + 0.024, 1e-9);
}

TEST_F(GoodputTest, LowerTiersCostTheirFetchTime) {
  auto placer = MakeGoodput({2.0, 0.2});
  // p0 idle and holding the whole 63-block prefix, 30 blocks on disk beyond 30 in G1 ...
  workers_[0].load.queued_prefill_tokens = 0;
  workers_.push_back(View(3, "p1", WorkerRole::kPrefill));
  const std::vector<WorkerMatch> disk = {Match(1, 60, {30, 0, 60, 0})};
  // ... p0: 30 x 10 ms fetch + 40 tokens (0.05 s) = 0.35 s beats p1's full 1.01 s prefill.
  Placement p = *placer->Place(workers_, disk, Request(1000, 16));
  EXPECT_EQ(p.prefill_id, "p0");
  EXPECT_NEAR(p.predicted_ttft_s, 0.3 + 0.05 + 0.063, 1e-9);
  // Held in host memory instead: 30 x 0.1 ms.
  const std::vector<WorkerMatch> host = {Match(1, 60, {30, 60, 0, 0})};
  p = *placer->Place(workers_, host, Request(1000, 16));
  EXPECT_NEAR(p.predicted_ttft_s, 0.003 + 0.05 + 0.063, 1e-9);
}

// A worker whose view carries its own profile (the router chose it at registration) is
// predicted with it: a decode worker on a device twice as fast wins a prompt that the policy's
// own profile would price the same on both.
TEST(GoodputPerWorkerProfileTest, EachWorkerIsPredictedWithItsOwnProfile) {
  auto placer = MakeGoodput({5.0, 0.2});
  std::vector<WorkerView> w = {View(1, "slow", WorkerRole::kMixed),
                               View(2, "fast", WorkerRole::kMixed)};
  auto fast = std::make_shared<WorkerProfile>(TestProfile());
  fast->prefill = {0.005, 0.0005, 0};
  fast->decode = {0.005, 5e-6, 0.0005};
  w[1].profile = fast;
  Placement p = *placer->Place(w, {}, Request(1000, 16));
  EXPECT_EQ(p.decode_id, "fast");
  EXPECT_NEAR(p.predicted_ttft_s, 0.005 + 0.5, 1e-9);
  EXPECT_NEAR(p.predicted_tpot_s, 0.005 + 5e-6 * 1000 + 0.0005, 1e-9);  // idle: no stall
  // The same worker list without the fast profile: both alike, the first listed wins.
  w[1].profile = nullptr;
  EXPECT_EQ(placer->Place(w, {}, Request(1000, 16))->decode_id, "slow");
}

TEST_F(GoodputTest, AdmissionRejectsUnderPredictedOverloadWithRetryAfter) {
  auto placer = MakeGoodput({1.0, 0.2});
  workers_[0].load.queued_prefill_tokens = 3000;  // 3 s queue on the prefill worker
  SetDecodeLoad(workers_[1], 8, 4000);
  workers_[1].load.queued_prefill_tokens = 2000;  // and 2 s on the decode worker
  auto r = placer->Place(workers_, {}, Request(500, 16));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("SLO"));
  auto retry = RetryAfterSeconds(r.status());
  ASSERT_TRUE(retry.has_value());
  EXPECT_GE(*retry, 1);
  EXPECT_LE(*retry, 60);
  // The same request in a relaxed class is admitted.
  auto ok = placer->Place(workers_, {}, Request(500, 16, "relaxed"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  // A full decode batch cannot take more: TPOT is infinite.
  SetDecodeLoad(workers_[1], 64, 4000);
  workers_[1].load.queued_prefill_tokens = 0;
  EXPECT_EQ(placer->Place(workers_, {}, Request(10, 16, "relaxed")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(RetryAfterSeconds(absl::ResourceExhaustedError("x")).has_value());
}

TEST_F(GoodputTest, AFullDecodeBatchSaysWaitingForASlotCouldHelp) {
  auto placer = MakeGoodput({2.0, 0.2});
  SetDecodeLoad(workers_[1], 64, 4000);  // at max_running: TPOT infinite on d0
  auto r = placer->Place(workers_, {}, Request(10, 16));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  // The least TTFT among candidates that meet 2 s: local on d0, one 20 ms prefill step
  // carrying the batch's decode rows (4000 x 10 us + 64 x 1 ms); remote would be 0.221 s.
  const std::optional<double> wait = MinTtftIfWaited(r.status());
  ASSERT_TRUE(wait.has_value());
  EXPECT_NEAR(*wait, 0.02 + 0.04 + 0.064, 1e-9);
  // TTFT out of reach (0.1 s) while the batch is full: waiting cannot help.
  auto tight = MakeGoodput({0.1, 0.2});
  EXPECT_FALSE(MinTtftIfWaited(tight->Place(workers_, {}, Request(10, 16)).status()).has_value());
  // Nor when even a batch of one misses TPOT: 5,000 context tokens take 61 ms > 50 ms.
  auto slow = MakeGoodput({100, 0.05});
  EXPECT_FALSE(
      MinTtftIfWaited(slow->Place(workers_, {}, Request(5000, 16)).status()).has_value());
  // A placement that only overloads the prefill queues (the other test) has no such hint.
  EXPECT_FALSE(MinTtftIfWaited(absl::ResourceExhaustedError("x")).has_value());
}

// The policy looks index matches up in a table by worker id, or by scanning the list when ids
// are large: both give the same decisions.
TEST(GoodputMatchLookupTest, LargeWorkerIdsDecideLikeSmallOnes) {
  for (WorkerId base : {WorkerId{0}, WorkerId{1} << 20}) {
    std::vector<WorkerView> w = {
        View(base + 1, "p0", WorkerRole::kPrefill), View(base + 2, "d0", WorkerRole::kDecode),
        View(base + 3, "p1", WorkerRole::kPrefill), View(base + 4, "d1", WorkerRole::kDecode)};
    SetDecodeLoad(w[1], 4, 2000);
    SetDecodeLoad(w[3], 2, 1000);
    w[2].load.queued_prefill_tokens = 500;
    // p1 holds 50 blocks in G1, d1 30 in G1, p0 20 on disk; a worker not in the pool 63.
    const std::vector<WorkerMatch> m = {Match(base + 1, 20, {0, 0, 20, 0}),
                                        Match(base + 3, 50, {50, 0, 0, 0}),
                                        Match(base + 4, 30, {30, 0, 0, 0}),
                                        Match(base + 9, 63, {63, 0, 0, 0})};
    auto placer = MakeGoodput({2.0, 0.2});
    Placement p = *placer->Place(w, m, Request(1000, 16));
    SCOPED_TRACE(base);
    EXPECT_EQ(p.decode_id, "d1");
    EXPECT_EQ(p.prefill_id, "p1");
    EXPECT_EQ(p.cached_blocks, 30);
    EXPECT_EQ(p.prefill_tokens, 200);
    // p1: 500 queued tokens (0.5 s) + 200 tokens (0.21 s); 33 blocks d1 lacks move (33 ms).
    EXPECT_NEAR(p.predicted_ttft_s, 0.5 + 0.21 + 0.033, 1e-9);
  }
}

TEST(GoodputLedgerTest, PendingPrefillFillsTheGapBetweenHeartbeats) {
  // One idle mixed worker; every admitted 400-token prompt queues 0.41 s more before the next.
  std::vector<WorkerView> w = {View(1, "m0", WorkerRole::kMixed)};
  auto placer = MakeGoodput({1.0, 0.2}, /*ledger=*/true);
  std::vector<Placement> admitted;
  for (int i = 0; i < 5; ++i) {
    auto r = placer->Place(w, {}, Request(400, 16));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
      break;
    }
    admitted.push_back(*r);
  }
  // TTFTs 0.41, 0.81 (the queue's step overhead counts per full step only), then 1.21 > 1.
  ASSERT_EQ(admitted.size(), 2u);
  EXPECT_EQ(placer->PendingPrefillTokens("m0"), 800);
  placer->OnFirstToken(admitted[0], -1);
  EXPECT_EQ(placer->PendingPrefillTokens("m0"), 400);
  EXPECT_TRUE(placer->Place(w, {}, Request(400, 16)).ok());
}

TEST(GoodputCorrectionTest, ObservedTtftScalesLaterPredictions) {
  std::vector<WorkerView> w = {View(1, "m0", WorkerRole::kMixed)};
  auto placer = MakeGoodput({10.0, 0.2});
  Placement p = *placer->Place(w, {}, Request(90));
  EXPECT_NEAR(p.predicted_ttft_s, 0.1, 1e-9);
  placer->OnFirstToken(p, 0.3);  // 3x slower than predicted
  EXPECT_NEAR(placer->TtftCorrection("m0"), 3.0, 1e-9);
  placer->OnFirstToken(p, 0.1);  // EMA: 3 + 0.2 x (1 - 3)
  EXPECT_NEAR(placer->TtftCorrection("m0"), 2.6, 1e-9);
  EXPECT_NEAR(placer->Place(w, {}, Request(90))->predicted_ttft_s, 0.26, 1e-9);
  EXPECT_EQ(placer->TtftCorrections().size(), 1u);
  EXPECT_EQ(placer->TtftCorrection("unknown"), 1.0);
}

TEST(SloParsingTest, TargetsAndClasses) {
  auto t = ParseSloTargets("ttft:0.5,tpot:0.05", {});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ttft_s, 0.5);
  EXPECT_EQ(t->tpot_s, 0.05);
  EXPECT_EQ(ParseSloTargets("tpot:0.1", {3, 1})->ttft_s, 3);
  EXPECT_FALSE(ParseSloTargets("ttft:-1", {}).ok());
  EXPECT_FALSE(ParseSloTargets("latency:1", {}).ok());
  auto c = ParseSloClass("interactive=ttft:0.5,tpot:0.05", {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first, "interactive");
  EXPECT_EQ(c->second.tpot_s, 0.05);
  EXPECT_FALSE(ParseSloClass("=ttft:1", {}).ok());
  EXPECT_FALSE(ParseSloClass("batch", {}).ok());
}

}  // namespace
}  // namespace strata::router
