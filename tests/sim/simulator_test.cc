// strata::sim: the G1 prefix cache, hand-checkable simulated timings, KV sharing through the
// router's real KvIndex and Placer, rejections, validation and determinism.
#include "strata/sim/simulator.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/replay/report.h"
#include "strata/sim/planner.h"
#include "strata/sim/prefix_cache.h"

namespace strata::sim {
namespace {

using replay::TraceRequest;
using router::KvEvent;
using ::testing::ElementsAre;

// Hand-written coefficients: prefill 10 ms + 1 ms/token, decode 20 ms per step, KV moves at
// 1 MB/s after 5 ms, 1000 bytes per block.
router::WorkerProfile TestProfile() {
  router::WorkerProfile p;
  p.name = "hand";
  p.block_size = 16;
  p.kv_block_bytes = 1000;
  p.num_kv_blocks = 1000;
  p.max_batch_tokens = 1000;
  p.max_running = 8;
  p.prefill = {0.01, 0.001, 0};
  p.decode = {0.02, 0, 0};
  p.kv_transfer = {1e6, 0.005};
  return p;
}

SimOptions Options(ClusterShape shape, const std::string& policy = "round-robin") {
  SimOptions o;
  o.profile = TestProfile();
  o.shape = shape;
  o.placement.policy = policy;
  o.heartbeat_interval_s = 0;
  return o;
}

TraceRequest Req(double t, int32_t in, int32_t out, std::vector<uint64_t> ids = {}) {
  TraceRequest r;
  r.arrival_s = t;
  r.input_tokens = in;
  r.output_tokens = out;
  r.block_ids = std::move(ids);
  return r;
}

// ---- prefix cache ---------------------------------------------------------------------------

TEST(PrefixCacheTest, SharesEvictsLruTailFirstAndReportsEvents) {
  PrefixCache cache(4);
  std::vector<KvEvent> ev;
  const std::vector<BlockHash> a = {11, 12, 13};
  ASSERT_TRUE(cache.Acquire(a, 0, 3, &ev));
  cache.Commit(a, 0, 3, &ev);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].parent_hash, 11u);
  EXPECT_EQ(ev[0].parent_hash, kRootBlockHash);
  cache.Release(a, 3, 0);
  EXPECT_EQ(cache.available(), 4);
  EXPECT_EQ(cache.Match(a), 3);
  ev.clear();
  // Two fresh blocks: one never-used block plus one eviction, the chain's tail (13) first.
  const std::vector<BlockHash> b = {21};
  ASSERT_TRUE(cache.Acquire(b, 0, 2, &ev));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(ev[0].hash, 13u);
  EXPECT_EQ(cache.Match(a), 2);
  // Referenced blocks are never evicted: a needs 11, 12 (+2 new) but only 0 never-used blocks
  // and 2 evictable ones that are exactly the matched ones.
  EXPECT_FALSE(cache.Acquire(a, 2, 2, &ev));
  EXPECT_EQ(cache.Match(a), 2);
  ASSERT_TRUE(cache.Acquire(a, 2, 0, &ev));
  EXPECT_EQ(cache.in_use(), 4);
}

TEST(PrefixCacheTest, CommitOfABlockSomeoneElseCommittedShares) {
  PrefixCache cache(10);
  std::vector<KvEvent> ev;
  const std::vector<BlockHash> c = {1, 2};
  ASSERT_TRUE(cache.Acquire(c, 0, 2, &ev));
  ASSERT_TRUE(cache.Acquire(c, 0, 2, &ev));
  cache.Commit(c, 0, 2, &ev);
  cache.Commit(c, 0, 2, &ev);
  EXPECT_EQ(ev.size(), 2u);      // stored once
  EXPECT_EQ(cache.in_use(), 2);  // the second copy was freed
  cache.Release(c, 2, 0);
  cache.Release(c, 2, 0);
  EXPECT_EQ(cache.available(), 10);
}

// ---- block chains ---------------------------------------------------------------------------

TEST(TraceBlockChainTest, TraceBlocksExpandToSharedEngineBlocks) {
  const auto a = TraceBlockChain(Req(0, 1024, 1, {7, 8}), 0, 16, 0);
  const auto b = TraceBlockChain(Req(0, 1000, 1, {7, 9}), 1, 16, 0);
  ASSERT_EQ(a.size(), 64u);
  ASSERT_EQ(b.size(), 62u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 32, b.begin()));
  EXPECT_NE(a[32], b[32]);
  EXPECT_EQ(a, TraceBlockChain(Req(5, 1024, 9, {7, 8}), 3, 16, 0));  // content only
  EXPECT_NE(a, TraceBlockChain(Req(0, 1024, 1, {7, 8}), 0, 16, 1));  // seed matters
  // No block ids: unique per request.
  EXPECT_NE(TraceBlockChain(Req(0, 64, 1), 0, 16, 0)[0],
            TraceBlockChain(Req(0, 64, 1), 1, 16, 0)[0]);
}

// ---- exact timings ----------------------------------------------------------------------------

TEST(SimulatorTest, OneMixedWorkerHandCheckedTimes) {
  absl::StatusOr<SimResult> r = Simulate({Req(1.0, 100, 5)}, Options({0, 0, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  const replay::RequestResult& x = r->results[0];
  ASSERT_TRUE(x.ok());
  EXPECT_NEAR(x.ttft_s, 0.01 + 0.1, 1e-12);      // one prefill step of 100 tokens
  EXPECT_NEAR(x.e2e_s, 0.11 + 4 * 0.02, 1e-12);  // then 4 decode steps
  EXPECT_NEAR(*replay::Tpot(x), 0.02, 1e-12);
  ASSERT_EQ(x.gaps_s.size(), 4u);
  for (double g : x.gaps_s) EXPECT_NEAR(g, 0.02, 1e-12);
  EXPECT_EQ(x.completion_tokens, 5);
  EXPECT_EQ(x.cached_tokens, 0);
  EXPECT_EQ(x.send_s, 1.0);
}

TEST(SimulatorTest, ChunkedPrefillUnderTheTokenBudget) {
  absl::StatusOr<SimResult> r = Simulate({Req(0, 2500, 1)}, Options({0, 0, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  // Chunks of 1000, 1000, 500 tokens.
  EXPECT_NEAR(r->results[0].ttft_s, 1.01 + 1.01 + 0.51, 1e-9);
  EXPECT_NEAR(r->results[0].e2e_s, r->results[0].ttft_s, 1e-12);
}

TEST(SimulatorTest, DisaggregatedAddsTheKvTransfer) {
  absl::StatusOr<SimResult> r = Simulate({Req(0, 100, 3)}, Options({1, 1, 0}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stats.remote_prefills, 1);
  // Prefill 0.11 s, then 7 blocks (6 full + partial) of 1000 B at 1 MB/s after 5 ms.
  EXPECT_NEAR(r->results[0].ttft_s, 0.11 + 0.005 + 0.007, 1e-12);
  EXPECT_NEAR(r->results[0].e2e_s, 0.122 + 2 * 0.02, 1e-12);
}

TEST(SimulatorTest, SequenceLimitQueuesTheSecondRequest) {
  SimOptions o = Options({0, 0, 1});
  o.profile.max_running = 1;
  absl::StatusOr<SimResult> r = Simulate({Req(0, 100, 2), Req(0, 100, 2)}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->results[0].e2e_s, 0.13, 1e-12);
  EXPECT_NEAR(r->results[1].ttft_s, 0.13 + 0.11, 1e-12);
}

// ---- KV sharing through the real index and placement ---------------------------------------

TEST(SimulatorTest, SharedPrefixIsReusedAndRoutedToItsHolder) {
  // Two mixed workers; the second and third requests share the first one's 1024-token prefix
  // and arrive after it finished: kv-aware sends them to the worker that holds it.
  const std::vector<TraceRequest> trace = {Req(0, 1024, 2, {1, 2}), Req(5, 1024, 2, {1, 2}),
                                           Req(10, 1500, 2, {1, 2, 3})};
  absl::StatusOr<SimResult> r = Simulate(trace, Options({0, 0, 2}, "kv-aware"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->results[0].cached_tokens, 0);
  EXPECT_EQ(r->results[1].cached_tokens, 1023);  // all but the last token
  EXPECT_NEAR(r->results[1].ttft_s, 0.01 + 0.001, 1e-12);
  EXPECT_EQ(r->results[2].cached_tokens, 1024);
  const replay::ReplaySummary s = replay::Summarize(r->results, {2.0, 0.1});
  EXPECT_EQ(s.prefix_cached_tokens, 2047);
  EXPECT_GT(r->stats.kv_events, 0);

  // Round-robin sends the second request to the other worker: no reuse.
  absl::StatusOr<SimResult> rr = Simulate(trace, Options({0, 0, 2}, "round-robin"));
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->results[1].cached_tokens, 0);
}

TEST(SimulatorTest, DecodeWorkerCachedPrefixShrinksTheTransfer) {
  SimOptions o = Options({1, 1, 0});
  const std::vector<TraceRequest> trace = {Req(0, 512, 2, {4}), Req(5, 512, 2, {4})};
  absl::StatusOr<SimResult> r = Simulate(trace, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // First: prefill 512 tokens (0.522 s) + 32 blocks (0.037 s). Second: prefill 1 token on the
  // prefill worker's cache (0.011 s), and the decode worker already holds all 32 blocks.
  EXPECT_NEAR(r->results[0].ttft_s, 0.522 + 0.005 + 0.032, 1e-12);
  EXPECT_NEAR(r->results[1].ttft_s, 0.011 + 0.005, 1e-12);
  EXPECT_EQ(r->results[1].cached_tokens, 511);
}

// ---- failures ---------------------------------------------------------------------------------

TEST(SimulatorTest, PlacementRejectionsAreCountedAs429) {
  SimOptions o = Options({0, 0, 1});
  o.placement.max_inflight_per_worker = 1;
  absl::StatusOr<SimResult> r = Simulate({Req(0, 100, 5), Req(0.01, 100, 5), Req(1, 100, 5)}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->results[0].ok());
  EXPECT_EQ(r->results[1].http_status, 429);
  EXPECT_EQ(r->results[1].error, replay::ErrorKind::kHttp4xx);
  EXPECT_TRUE(r->results[2].ok());  // the first had finished by then
  EXPECT_EQ(r->stats.rejected, 1);
  const replay::ReplaySummary s = replay::Summarize(r->results, {2.0, 0.1});
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.errors_by_kind.at("http_4xx"), 1);
  EXPECT_EQ(s.slo_met, 2);
}

// The router's admission queue in the simulator: with 2 decode slots, a third request is
// infeasible only on TPOT; it waits and is served when a slot frees (queue on), gets 429 at once
// (queue off), or gets 429 when its slack runs out first (tight TTFT target).
TEST(SimulatorTest, TheAdmissionQueueHoldsTpotBlockedRequestsUntilASlotFrees) {
  auto run = [](int queue, double ttft) {
    SimOptions o = Options({0, 0, 1}, "goodput");
    o.profile.max_running = 2;
    o.placement.slo = {ttft, 0.1};
    o.admission.capacity = queue;
    absl::StatusOr<SimResult> r = Simulate({Req(0, 100, 5), Req(0, 100, 5), Req(0, 100, 5)}, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const SimResult queued = run(8, 5.0);
  for (const auto& res : queued.results) EXPECT_TRUE(res.ok()) << res.error_message;
  EXPECT_EQ(queued.stats.queued, 1);
  EXPECT_EQ(queued.stats.queue_placed, 1);
  EXPECT_EQ(queued.stats.rejected, 0);
  // The third starts only when the first ends (after its prefill and 4 decode steps); its TTFT
  // counts from its arrival, so it includes the wait.
  EXPECT_NEAR(queued.results[0].ttft_s, 0.11, 1e-9);
  EXPECT_GT(queued.results[2].ttft_s, queued.results[0].e2e_s);
  EXPECT_GT(queued.results[2].ttft_s, queued.results[1].ttft_s);

  const SimResult off = run(0, 5.0);
  EXPECT_EQ(off.results[2].http_status, 429);
  EXPECT_EQ(off.stats.queued, 0);
  EXPECT_EQ(off.stats.rejected, 1);

  // TTFT target 0.35 s: predicted 0.31 s once a slot frees (0.2 s of prompts queued ahead, then
  // its own 0.11 s), so it may wait until 0.04 s; the first slot frees far later.
  const SimResult expired = run(8, 0.35);
  EXPECT_TRUE(expired.results[0].ok());
  EXPECT_EQ(expired.results[2].http_status, 429);
  EXPECT_EQ(expired.results[2].error_type, "rate_limit_error");
  EXPECT_NEAR(expired.results[2].e2e_s, 0.04, 1e-6);
  EXPECT_EQ(expired.stats.queued, 1);
  EXPECT_EQ(expired.stats.slack_expired, 1);
  EXPECT_EQ(expired.stats.rejected, 1);
}

TEST(SimulatorTest, RequestLargerThanAWorkerFailsInsteadOfStalling) {
  SimOptions o = Options({0, 0, 1});
  o.profile.num_kv_blocks = 10;  // 160 tokens
  absl::StatusOr<SimResult> r = Simulate({Req(0, 500, 5), Req(0, 100, 5)}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->results[0].http_status, 400);
  EXPECT_TRUE(r->results[1].ok());
}

// A colocated prefill and decode worker time-slice one device: a decode step that starts while
// the partner prefills takes twice its time; with the partner idle, the profiled time.
TEST(SimulatorTest, ColocatedWorkersTimeSliceTheirDevice) {
  // Request 0 decodes 40 steps (0.8 s) from 0.122 s; request 1 arrives at 0.3 s and its 1,000
  // token prompt prefills for 1.01 s on the partner.
  const std::vector<TraceRequest> trace = {Req(0, 100, 41), Req(0.3, 1000, 2)};
  ClusterShape split{1, 1, 0};
  auto apart = Simulate(trace, Options(split));
  split.colocated = true;
  auto together = Simulate(trace, Options(split));
  ASSERT_TRUE(apart.ok() && together.ok()) << together.status();
  EXPECT_NEAR(*replay::Tpot(apart->results[0]), 0.02, 1e-12);
  // Steps that start while the partner's prefill runs (from 0.3 s on) take 40 ms.
  EXPECT_GT(*replay::Tpot(together->results[0]), 0.03);
  for (double g : together->results[0].gaps_s) {
    EXPECT_TRUE(std::abs(g - 0.02) < 1e-9 || std::abs(g - 0.04) < 1e-9) << g;
  }
  // The prefill started while a decode step ran: it takes twice its 1.01 s.
  EXPECT_NEAR(apart->results[1].ttft_s, 1.01 + 0.005 + 0.063, 1e-9);
  EXPECT_GT(together->results[1].ttft_s, 2.0);
  EXPECT_EQ(split.ToString(), "1P:1D colocated");
  EXPECT_EQ(split.gpus(), 1);
  ClusterShape bad{1, 2, 0, true};
  EXPECT_EQ(Simulate(trace, Options(bad)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SimulatorTest, InvalidConfigurations) {
  EXPECT_EQ(Simulate({}, Options({1, 0, 0})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate({}, Options({1, 1, 1})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate({}, Options({0, 0, 1}, "nope")).status().code(),
            absl::StatusCode::kInvalidArgument);
  SimOptions o = Options({0, 0, 1});
  o.profile.block_size = 24;
  EXPECT_EQ(Simulate({}, o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Simulate({Req(2, 1, 1), Req(1, 1, 1)}, Options({0, 0, 1})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SimulatorTest, ZeroKvBlocksMeansTheWorkersDefaultCache) {
  router::WorkerProfile p = TestProfile();
  p.num_kv_blocks = 0;
  p.kv_block_bytes = 32768;
  EXPECT_EQ(EffectiveProfile(p).num_kv_blocks, 8192);  // 256 MiB
  SimOptions o = Options({0, 0, 1});
  o.profile = p;
  EXPECT_TRUE(Simulate({Req(0, 100, 2)}, o).ok());
}

// ---- determinism --------------------------------------------------------------------------

std::vector<TraceRequest> RandomTrace(int n) {
  std::mt19937_64 rng(42);
  std::vector<TraceRequest> out;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    t += std::uniform_real_distribution<double>(0, 0.05)(rng);
    const int blocks = 1 + static_cast<int>(rng() % 4);
    std::vector<uint64_t> ids;
    for (int b = 0; b < blocks; ++b) ids.push_back(b == 0 ? rng() % 5 : rng() % 1000);
    out.push_back(Req(t, blocks * 512 - static_cast<int>(rng() % 500), 1 + rng() % 30, ids));
  }
  return out;
}

TEST(SimulatorTest, SameInputsGiveByteIdenticalSummaries) {
  const std::vector<TraceRequest> trace = RandomTrace(400);
  for (const std::string policy : {"kv-aware", "least-loaded", "round-robin"}) {
    SimOptions o = Options({2, 3, 0}, policy);
    o.heartbeat_interval_s = 0.1;
    auto a = Simulate(trace, o);
    auto b = Simulate(trace, o);
    ASSERT_TRUE(a.ok() && b.ok());
    const replay::SloSpec slo{1.0, 0.05};
    EXPECT_EQ(replay::SummaryJson(replay::Summarize(a->results, slo)).dump(),
              replay::SummaryJson(replay::Summarize(b->results, slo)).dump())
        << policy;
    EXPECT_EQ(a->stats.events, b->stats.events);
    EXPECT_EQ(a->results.size(), 400u);
    EXPECT_EQ(replay::Summarize(a->results, slo).completed, 400);
  }
}

// ---- planner ------------------------------------------------------------------------------

TEST(PlannerTest, GridSplits) {
  EXPECT_THAT(GridSplits(4, 7), ElementsAre(1, 2, 3));
  EXPECT_THAT(GridSplits(64, 7), ElementsAre(8, 16, 24, 32, 40, 48, 56));
  EXPECT_TRUE(GridSplits(1, 7).empty());
}

TEST(PlannerTest, PlansASmallClusterAndPrintsReplicas) {
  const std::vector<TraceRequest> trace = RandomTrace(150);
  PlanOptions po;
  po.gpus = 3;
  po.slo = {3.0, 0.05};
  po.search.max_evaluations = 6;
  SimOptions base = Options({0, 0, 1}, "kv-aware");
  absl::StatusOr<PlanResult> plan = Plan(trace, {}, base, po);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->candidates.size(), 3u);  // aggregated, 1P:2D, 2P:1D
  EXPECT_TRUE(plan->candidates[0].shape.aggregated());
  ASSERT_GE(plan->best, 0);
  const std::string text = FormatPlan(*plan, po);
  EXPECT_THAT(text, ::testing::HasSubstr("recommended:"));
  EXPECT_THAT(text, ::testing::HasSubstr("deployment/strata-decode --replicas="));
}

}  // namespace
}  // namespace strata::sim
