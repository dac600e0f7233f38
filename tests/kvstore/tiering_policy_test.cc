// The tiering policy's engine-free decisions: fetch or recompute, and which G4 daemons to use.
#include "strata/kvstore/tiering_policy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::kvstore {
namespace {

// 1 ms per fetch call, 1 GB/s; 1 MB blocks of 100 tokens; prefill at 10,000 tokens/s, so
// recomputing a block takes 10 ms and fetching n blocks from one tier 1 + n ms.
TierCost FastTier(TierKind) { return {.bytes_per_second = 1e9, .latency_seconds = 1e-3}; }

FetchCandidate Candidate(const std::vector<TierKind>& located, int64_t host_blocks = 1000) {
  return {.located = located,
          .block_tokens = 100,
          .block_bytes = 1'000'000,
          .host_blocks = host_blocks,
          .prefill_tokens_per_second = 10'000};
}

TEST(PlanFetchTest, FetchesTheRunWhenItBeatsRecomputing) {
  const std::vector<TierKind> located(8, TierKind::kDisk);
  EXPECT_EQ(PlanFetch(FetchPolicy{}, Candidate(located), FastTier), 8);
  EXPECT_EQ(PlanFetch(FetchPolicy{}, Candidate({}), FastTier), 0);
}

TEST(PlanFetchTest, RecomputesWhenTheTierIsSlowerThanThePrefill) {
  const std::vector<TierKind> located(8, TierKind::kRemote);
  auto slow = [](TierKind) { return TierCost{.bytes_per_second = 1e7, .latency_seconds = 1}; };
  EXPECT_EQ(PlanFetch(FetchPolicy{}, Candidate(located), slow), 0);
}

TEST(PlanFetchTest, UsesTheDefaultRateUntilOneIsMeasured) {
  // At 2,000 tokens/s a block takes 50 ms to recompute; at 1e9 tokens/s nothing is worth a
  // fetch.
  const std::vector<TierKind> located(4, TierKind::kDisk);
  FetchCandidate c = Candidate(located);
  c.prefill_tokens_per_second = 0;
  EXPECT_EQ(PlanFetch(FetchPolicy{}, c, FastTier), 4);
  c.prefill_tokens_per_second = 1e9;
  EXPECT_EQ(PlanFetch(FetchPolicy{}, c, FastTier), 0);
}

TEST(PlanFetchTest, StopsWhereTheNextTierCostsMoreThanItSaves) {
  // Two G3 blocks, then G4 blocks whose one extra call costs more than all of them save.
  std::vector<TierKind> located = {TierKind::kDisk, TierKind::kDisk};
  located.insert(located.end(), 3, TierKind::kRemote);
  auto cost = [](TierKind kind) {
    if (kind == TierKind::kRemote) return TierCost{.bytes_per_second = 1e9, .latency_seconds = 1};
    return FastTier(kind);
  };
  EXPECT_EQ(PlanFetch(FetchPolicy{}, Candidate(located), cost), 2);
}

TEST(PlanFetchTest, AtMostHalfOfTheHostTier) {
  const std::vector<TierKind> located(8, TierKind::kDisk);
  EXPECT_EQ(PlanFetch(FetchPolicy{}, Candidate(located, 6), FastTier), 3);
  EXPECT_EQ(PlanFetch(FetchPolicy{}, Candidate(located, 1), FastTier), 1);
}

TEST(OffloadModeTest, ParsesItsNames) {
  EXPECT_EQ(*ParseOffloadMode("write-back"), OffloadMode::kWriteBack);
  EXPECT_EQ(*ParseOffloadMode("write-through"), OffloadMode::kWriteThrough);
  EXPECT_EQ(ParseOffloadMode("write-around").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvstoreDiscoveryTest, FollowsTheRouterWithAGracePeriod) {
  KvstoreDiscovery d(absl::Seconds(5));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // The first answer always comes, even when the router lists nothing yet.
  EXPECT_EQ(d.Update({}, t0), std::vector<std::string>{});
  EXPECT_EQ(d.Update({}, t0), std::nullopt);
  EXPECT_EQ(d.Update({"b:1", "a:1"}, t0), (std::vector<std::string>{"a:1", "b:1"}));
  EXPECT_EQ(d.Update({"a:1", "b:1"}, t0 + absl::Seconds(1)), std::nullopt) << "same set";
  // b drops out of the list (missed heartbeats, or the router restarted): kept for the grace.
  EXPECT_EQ(d.Update({"a:1"}, t0 + absl::Seconds(2)), std::nullopt);
  EXPECT_EQ(d.Update({}, t0 + absl::Seconds(3)), std::nullopt);
  EXPECT_EQ(d.Update({"a:1"}, t0 + absl::Seconds(6)), std::nullopt) << "b listed 5 s ago";
  EXPECT_EQ(d.Update({"a:1"}, t0 + absl::Seconds(7)), std::vector<std::string>{"a:1"});
  // A new daemon joins at once.
  EXPECT_EQ(d.Update({"c:1", "a:1"}, t0 + absl::Seconds(8)),
            (std::vector<std::string>{"a:1", "c:1"}));
  // The router lists none for longer than the grace: all go.
  EXPECT_EQ(d.Update({}, t0 + absl::Seconds(12)), std::nullopt);
  EXPECT_EQ(d.Update({}, t0 + absl::Seconds(14)), std::vector<std::string>{});
}

}  // namespace
}  // namespace strata::kvstore
