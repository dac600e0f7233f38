// UseSketchOptions, CostEstimator and StoreMetrics (see tiered_store_internal.h).
#include <algorithm>
#include <bit>
#include <functional>

#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"
#include "tiered_store_internal.h"

namespace strata::kvstore::internal {

// ---- use sketch -----------------------------------------------------------------------------

CountMinSketch::Options UseSketchOptions(int64_t expected_keys) {
  const uint64_t width =
      std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(1024, expected_keys)) * 4);
  return {.width = width,
          .max_count = 255,
          .age_every = static_cast<int64_t>(width) * 10,
          .halve_additions = false};
}

// ---- CostEstimator ---------------------------------------------------------------------------

void CostEstimator::Observe(double bytes, double seconds) {
  if (bytes <= 0 || seconds <= 0) return;
  ++cost_.samples;
  const double a = std::max(0.1, 1.0 / static_cast<double>(cost_.samples));
  ex_ += a * (bytes - ex_);
  ey_ += a * (seconds - ey_);
  exx_ += a * (bytes * bytes - exx_);
  exy_ += a * (bytes * seconds - exy_);
  const double var = exx_ - ex_ * ex_;
  if (cost_.samples >= 2 && var > 0.0025 * ex_ * ex_) {  // sizes vary by > ~5%
    const double slope = (exy_ - ex_ * ey_) / var;
    if (slope > 0) {
      cost_.bytes_per_second = 1.0 / slope;
      cost_.latency_seconds = std::max(0.0, ey_ - slope * ex_);
      return;
    }
  }
  cost_.latency_seconds = std::min(cost_.latency_seconds, 0.5 * ey_);
  cost_.bytes_per_second = ex_ / (ey_ - cost_.latency_seconds);
}

TierCost DefaultTierCost(TierKind kind) {
  switch (kind) {
    case TierKind::kHost:
      return {.bytes_per_second = 10e9, .latency_seconds = 2e-6};
    case TierKind::kDisk:
      return {.bytes_per_second = 1e9, .latency_seconds = 100e-6};
    case TierKind::kRemote:
      return {.bytes_per_second = 2e9, .latency_seconds = 200e-6};
    case TierKind::kDevice:
      break;
  }
  return {.bytes_per_second = 100e9, .latency_seconds = 1e-6};
}

// ---- StoreMetrics ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<StoreMetrics>> StoreMetrics::Create(
    metrics::Registry* registry, const std::string& prefix,
    const std::array<const Tier*, kNumTierKinds>& tiers) {
  std::unique_ptr<StoreMetrics> m(new StoreMetrics);
  if (registry != nullptr) STRATA_RETURN_IF_ERROR(m->Register(*registry, prefix, tiers));
  return m;
}

// Every tier's TierStats counters and TierUsage gauges, read at scrape time.
absl::Status StoreMetrics::Register(metrics::Registry& registry, const std::string& prefix,
                                    const std::array<const Tier*, kNumTierKinds>& tiers) {
  using StatFn = std::function<double(const TierStats&)>;
  struct CounterSpec {
    const char* name;
    const char* help;
    StatFn fn;
  };
  const CounterSpec counters[] = {
      {"hits", "Reads that found a verified block.", [](auto& s) { return s.hits; }},
      {"misses", "Reads that found no block or a corrupt one.", [](auto& s) { return s.misses; }},
      {"puts", "Blocks stored.", [](auto& s) { return s.puts; }},
      {"bytes_in", "Value bytes written into the tier.", [](auto& s) { return s.bytes_in; }},
      {"bytes_out", "Value bytes read out of the tier.", [](auto& s) { return s.bytes_out; }},
      {"evictions", "Blocks dropped to make room.", [](auto& s) { return s.evictions; }},
      {"checksum_failures", "Reads whose checksum did not match.",
       [](auto& s) { return s.checksum_failures; }},
      {"rejected", "Puts refused (no room or errors).", [](auto& s) { return s.rejected; }},
      {"index_resets", "Corrupt indexes moved aside, the tier started empty.",
       [](auto& s) { return s.index_resets; }},
      {"index_dropped_entries", "Malformed index entries dropped while loading.",
       [](auto& s) { return s.index_dropped_entries; }},
  };
  using UsageFn = std::function<double(const TierUsage&)>;
  struct GaugeSpec {
    const char* name;
    const char* help;
    UsageFn fn;
  };
  const GaugeSpec gauges[] = {
      {"usage_blocks", "Blocks held.", [](auto& u) { return u.blocks; }},
      {"usage_bytes", "Value bytes held.", [](auto& u) { return u.bytes; }},
      {"capacity_bytes", "Configured capacity in bytes.", [](auto& u) { return u.capacity_bytes; }},
  };
  for (const CounterSpec& spec : counters) {
    STRATA_ASSIGN_OR_RETURN(
        metrics::CounterFamily * family,
        registry.AddCounter(absl::StrCat(prefix, "_", spec.name, "_total"), spec.help, {"tier"}));
    for (const Tier* tier : tiers) {
      if (tier == nullptr) continue;
      callbacks_.push_back(family->AddCallback({std::string(TierName(tier->kind()))},
                                               [tier, fn = spec.fn] { return fn(tier->stats()); }));
    }
  }
  for (const GaugeSpec& spec : gauges) {
    STRATA_ASSIGN_OR_RETURN(
        metrics::GaugeFamily * family,
        registry.AddGauge(absl::StrCat(prefix, "_", spec.name), spec.help, {"tier"}));
    for (const Tier* tier : tiers) {
      if (tier == nullptr) continue;
      callbacks_.push_back(family->AddCallback({std::string(TierName(tier->kind()))},
                                               [tier, fn = spec.fn] { return fn(tier->usage()); }));
    }
  }
  return RegisterStoreFamilies(registry, prefix, tiers);
}

// The store's own metrics: fetch latency per tier and demotion counters.
absl::Status StoreMetrics::RegisterStoreFamilies(
    metrics::Registry& registry, const std::string& prefix,
    const std::array<const Tier*, kNumTierKinds>& tiers) {
  STRATA_ASSIGN_OR_RETURN(
      metrics::HistogramFamily * fetch,
      registry.AddHistogram(absl::StrCat(prefix, "_fetch_seconds"),
                            "Seconds to read one run of blocks from a tier.",
                            metrics::ExponentialBuckets(1e-5, 4, 10), {"tier"}));
  STRATA_ASSIGN_OR_RETURN(
      metrics::CounterFamily * demoted,
      registry.AddCounter(absl::StrCat(prefix, "_demotions_total"),
                          "Blocks evicted from host memory and written to a lower tier.",
                          {"tier"}));
  for (int k = 0; k < kNumTierKinds; ++k) {
    if (tiers[k] == nullptr) continue;
    const std::string name(TierName(static_cast<TierKind>(k)));
    fetch_[k] = fetch->WithLabels({name});
    if (k != static_cast<int>(TierKind::kHost)) demoted_[k] = demoted->WithLabels({name});
  }
  STRATA_ASSIGN_OR_RETURN(
      metrics::CounterFamily * dropped,
      registry.AddCounter(absl::StrCat(prefix, "_demotions_dropped_total"),
                          "Demotions dropped because the demotion queue was full."));
  dropped_ = dropped->Default();
  return absl::OkStatus();
}

void StoreMetrics::ObserveFetch(TierKind kind, double seconds) {
  if (auto* h = fetch_[static_cast<int>(kind)]) h->Observe(seconds);
}

void StoreMetrics::Demoted(TierKind kind) {
  if (auto* c = demoted_[static_cast<int>(kind)]) c->Increment();
}

void StoreMetrics::DemotionDropped() {
  if (dropped_ != nullptr) dropped_->Increment();
}

}  // namespace strata::kvstore::internal
