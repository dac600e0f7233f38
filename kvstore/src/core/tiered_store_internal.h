#pragma once
// Parts of TieredStore kept apart from its data flow (tiered_store.cc): the use counter for the
// G3 frequency filter, the per-tier fetch-cost estimator, and the Prometheus metrics.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/common/metrics.h"
#include "strata/kvstore/count_min_sketch.h"
#include "strata/kvstore/tier.h"
#include "strata/kvstore/tiered_store.h"

namespace strata::kvstore::internal {

// The use counter of the G3 frequency filter (count_min_sketch.h): width a power of two >= 4 x
// expected_keys (at least 4096 counters per row), counts up to 255, aged every 10 x width
// additions. Collisions can only overcount, i.e. admit a block to disk early, never refuse a
// block that earned it.
CountMinSketch::Options UseSketchOptions(int64_t expected_keys);

// TierCost as an exponential moving average: keeps EMAs of run bytes x, run seconds y, x^2
// and x*y and fits y = latency + x / bandwidth by least squares over them. While runs are all
// about the same size (x barely varies) latency cannot be separated from bandwidth: the prior
// latency is kept (capped at half the mean run time) and bandwidth is whatever explains the
// rest. Early samples are averaged evenly (weight 1/n), later ones with weight 0.1.
class CostEstimator {
 public:
  explicit CostEstimator(TierCost prior) : cost_(prior) {}
  void Observe(double bytes, double seconds);
  TierCost cost() const { return cost_; }

 private:
  TierCost cost_;
  double ex_ = 0, ey_ = 0, exx_ = 0, exy_ = 0;
};

// The defaults each tier's cost starts from (documented in docs/kvstore.md).
TierCost DefaultTierCost(TierKind kind);

// The store's Prometheus metrics. Tier counters and gauges are scrape-time callbacks reading
// Tier::stats()/usage(), so tiers stay free of metric code; the store itself adds the fetch
// latency histograms and demotion counters. All methods are thread-safe; without a registry
// every method is a no-op.
class StoreMetrics {
 public:
  // `tiers` indexed by TierKind (null: not configured). The tiers must outlive this object.
  static absl::StatusOr<std::unique_ptr<StoreMetrics>> Create(
      metrics::Registry* registry, const std::string& prefix,
      const std::array<const Tier*, kNumTierKinds>& tiers);

  void ObserveFetch(TierKind kind, double seconds);
  void Demoted(TierKind kind);
  void DemotionDropped();

 private:
  StoreMetrics() = default;
  absl::Status Register(metrics::Registry& registry, const std::string& prefix,
                        const std::array<const Tier*, kNumTierKinds>& tiers);
  absl::Status RegisterStoreFamilies(metrics::Registry& registry, const std::string& prefix,
                                     const std::array<const Tier*, kNumTierKinds>& tiers);

  std::vector<metrics::CallbackHandle> callbacks_;
  std::array<metrics::Histogram*, kNumTierKinds> fetch_{};
  std::array<metrics::Counter*, kNumTierKinds> demoted_{};
  metrics::Counter* dropped_ = nullptr;
};

}  // namespace strata::kvstore::internal
