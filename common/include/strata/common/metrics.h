#pragma once
// A small Prometheus metrics registry: counters, gauges and histograms grouped in labeled families,
// serialized in the text exposition format 0.0.4 (what every Prometheus server scrapes).
//
//   auto& requests = metrics::Registry::Default().CounterOrDie(
//       "strata_router_requests_total", "Requests by HTTP status.", {"code"});
//   metrics::Counter* ok = requests.WithLabels({"200"});  // cache it; the pointer is stable
//   ok->Increment();                                       // lock-free
//
// Threading: every method of every class here is thread-safe. Increment/Set/Observe on a child
// are lock-free atomics; WithLabels and registration take a per-family / per-registry mutex, so
// hot paths should look a child up once and keep the pointer, which stays valid for the lifetime
// of its registry.
//
// Names are checked at registration: metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* (Prometheus forbids ':' in label names) and must not start with "__";
// counters must end in "_total"; histograms may not use the label "le". A bad name is an
// InvalidArgument error. Registering the same name again with the same type, help, labels (and
// buckets) returns the existing family, so a component constructed twice in one process shares
// its metrics; any difference is AlreadyExists.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace strata::metrics {

// Content-Type header value for a scrape response.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

using LabelValues = std::vector<std::string>;

// A monotonically increasing value (requests served, bytes sent, seconds spent).
class Counter {
 public:
  // Negative or NaN increments are ignored: a counter never goes down.
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, free KV blocks).
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1.0) { value_.fetch_add(delta, std::memory_order_relaxed); }
  void Decrement(double delta = 1.0) { value_.fetch_add(-delta, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into buckets with explicit upper bounds (inclusive: a value equal to a
// bound lands in that bucket); +Inf is implicit. NaN observations count in +Inf only.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;           // finite upper bounds, increasing
    std::vector<uint64_t> cumulative;     // bounds.size() + 1 entries; the last is +Inf == count
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot Collect() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Bucket helpers: start, start+width, ...; start, start*factor, ... (count bounds each).
std::vector<double> LinearBuckets(double start, double width, int count);
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Keeps a callback registered while alive (see Family::AddCallback); movable, not copyable.
class CallbackHandle {
 public:
  CallbackHandle() = default;
  explicit CallbackHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  CallbackHandle(CallbackHandle&& other) noexcept : remove_(std::move(other.remove_)) {
    other.remove_ = nullptr;
  }
  CallbackHandle& operator=(CallbackHandle&& other) noexcept;
  CallbackHandle(const CallbackHandle&) = delete;
  CallbackHandle& operator=(const CallbackHandle&) = delete;
  ~CallbackHandle() { Reset(); }
  void Reset();  // unregisters now

 private:
  std::function<void()> remove_;
};

enum class MetricType { kCounter, kGauge, kHistogram };

// Common part of a family: name, help, label names, and text serialization.
class FamilyBase {
 public:
  FamilyBase(MetricType type, std::string name, std::string help,
             std::vector<std::string> label_names)
      : type_(type), name_(std::move(name)), help_(std::move(help)),
        label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;

  MetricType type() const { return type_; }
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends "# HELP", "# TYPE" and every sample; appends nothing if the family has no children.
  void AppendText(std::string& out) const;

 protected:
  // Appends the sample lines only, children ordered by label values.
  virtual void AppendSamples(std::string& out) const = 0;
  void CheckArity(const LabelValues& values) const;

 private:
  const MetricType type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

// A counter or gauge family: children by label values, plus callback children whose value is
// computed at scrape time (e.g. a queue depth owned by another component).
template <typename T>
class ScalarFamily final : public FamilyBase {
 public:
  using FamilyBase::FamilyBase;

  // The child for these label values (one per label name; a wrong count is a bug and crashes).
  // Created on first use; the pointer stays valid for the registry's lifetime.
  T* WithLabels(const LabelValues& values);
  T* Default() { return WithLabels({}); }  // for a family without labels

  // Reports fn() for `values` at every scrape until the handle is destroyed. fn runs on the
  // scraping thread, must be thread-safe and must not touch this registry. A callback replaces
  // a regular child with the same label values in the output.
  [[nodiscard]] CallbackHandle AddCallback(const LabelValues& values, std::function<double()> fn);

 private:
  void AppendSamples(std::string& out) const override;

  mutable absl::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
  // A named struct rather than a std::pair: clang 14 (the fuzz build) does not emit the
  // destructor of std::pair<uint64_t, std::function<double()>> that this map needs.
  struct Callback {
    uint64_t id = 0;
    std::function<double()> fn;
  };
  std::map<LabelValues, Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_callback_id_ ABSL_GUARDED_BY(mu_) = 0;
};

using CounterFamily = ScalarFamily<Counter>;
using GaugeFamily = ScalarFamily<Gauge>;

class HistogramFamily final : public FamilyBase {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds)
      : FamilyBase(MetricType::kHistogram, std::move(name), std::move(help),
                   std::move(label_names)),
        bounds_(std::move(bounds)) {}

  Histogram* WithLabels(const LabelValues& values);
  Histogram* Default() { return WithLabels({}); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  void AppendSamples(std::string& out) const override;

  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<Histogram>> children_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry that /metrics endpoints serve.
  static Registry& Default();

  absl::StatusOr<CounterFamily*> AddCounter(const std::string& name, const std::string& help,
                                            const std::vector<std::string>& label_names = {});
  absl::StatusOr<GaugeFamily*> AddGauge(const std::string& name, const std::string& help,
                                        const std::vector<std::string>& label_names = {});
  // `bounds`: finite, strictly increasing upper bounds; a trailing +Inf is accepted and dropped.
  absl::StatusOr<HistogramFamily*> AddHistogram(const std::string& name, const std::string& help,
                                                std::vector<double> bounds,
                                                const std::vector<std::string>& label_names = {});

  // The same, crashing with the reason on a bad or conflicting name: for names fixed in code.
  CounterFamily& CounterOrDie(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names = {});
  GaugeFamily& GaugeOrDie(const std::string& name, const std::string& help,
                          const std::vector<std::string>& label_names = {});
  HistogramFamily& HistogramOrDie(const std::string& name, const std::string& help,
                                  std::vector<double> bounds,
                                  const std::vector<std::string>& label_names = {});

  // Text exposition format 0.0.4, families sorted by name.
  std::string Serialize() const;

 private:
  // Returns the existing family `name` if it matches `probe`, else registers `probe`.
  absl::StatusOr<FamilyBase*> Register(std::unique_ptr<FamilyBase> probe);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// Exposed for tests and for other exposition code.
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);
std::string FormatValue(double value);         // "+Inf", "-Inf", "NaN", "3", "0.25", "1e+20"
std::string EscapeLabelValue(std::string_view value);  // \\, \", \n
std::string EscapeHelp(std::string_view help);          // \\, \n

}  // namespace strata::metrics
