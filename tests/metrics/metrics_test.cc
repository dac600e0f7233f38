// The metrics registry: exact exposition text, escaping, name checks, histogram buckets,
// callbacks and concurrent updates.
#include "strata/common/metrics.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, SerializesSmallRegistryExactly) {
  Registry r;
  auto& requests = r.CounterOrDie("http_requests_total", "Requests.", {"code", "method"});
  requests.WithLabels({"500", "post"})->Increment();
  requests.WithLabels({"200", "get"})->Increment(3);
  r.GaugeOrDie("queue_depth", "Queue depth.").Default()->Set(2.5);
  Histogram* latency = r.HistogramOrDie("latency_seconds", "Latency.", {0.25, 1}).Default();
  latency->Observe(0.25);
  latency->Observe(0.5);
  latency->Observe(3);
  // An empty labeled family prints nothing at all.
  r.CounterOrDie("unused_total", "Never used.", {"x"});

  EXPECT_EQ(r.Serialize(),
            "# HELP http_requests_total Requests.\n"
            "# TYPE http_requests_total counter\n"
            "http_requests_total{code=\"200\",method=\"get\"} 3\n"
            "http_requests_total{code=\"500\",method=\"post\"} 1\n"
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{le=\"0.25\"} 1\n"
            "latency_seconds_bucket{le=\"1\"} 2\n"
            "latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "latency_seconds_sum 3.75\n"
            "latency_seconds_count 3\n"
            "# HELP queue_depth Queue depth.\n"
            "# TYPE queue_depth gauge\n"
            "queue_depth 2.5\n");
}

TEST(MetricsTest, EscapesHelpAndLabelValues) {
  Registry r;
  auto& c = r.CounterOrDie("esc_total", "a \\ back\nslash \"quoted\"", {"path"});
  c.WithLabels({"C:\\dir\n\"x\""})->Increment();
  EXPECT_EQ(r.Serialize(),
            "# HELP esc_total a \\\\ back\\nslash \"quoted\"\n"
            "# TYPE esc_total counter\n"
            "esc_total{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1\n");
}

TEST(MetricsTest, FormatsValuesPrometheusCanParse) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(1e15), "1000000000000000");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(1.0 / 3)), 1.0 / 3);  // round-trips
}

TEST(MetricsTest, RejectsInvalidNames) {
  Registry r;
  EXPECT_EQ(r.AddCounter("requests", "no _total").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(r.AddGauge("1abc", "digit first").ok());
  EXPECT_FALSE(r.AddGauge("a-b", "dash").ok());
  EXPECT_FALSE(r.AddGauge("", "empty").ok());
  EXPECT_FALSE(r.AddGauge("ok_name", "bad label", {"a:b"}).ok());
  EXPECT_FALSE(r.AddGauge("ok_name", "reserved label", {"__x"}).ok());
  EXPECT_FALSE(r.AddGauge("ok_name", "dup label", {"a", "a"}).ok());
  EXPECT_FALSE(r.AddHistogram("h_seconds", "le label", {1}, {"le"}).ok());
  EXPECT_FALSE(r.AddHistogram("h_seconds", "unsorted", {2, 1}).ok());
  EXPECT_FALSE(r.AddHistogram("h_seconds", "nan", {std::nan("")}).ok());
  EXPECT_TRUE(r.AddGauge("ns:sub_name", "colons ok in metric names").ok());
  EXPECT_TRUE(r.AddCounter("x_total", "", {"_a", "B9"}).ok());
  EXPECT_THAT(r.AddCounter("bad name_total", "").status().message(), HasSubstr("bad name_total"));
}

TEST(MetricsTest, ReRegistrationReturnsSameFamilyOrConflicts) {
  Registry r;
  auto a = r.AddCounter("x_total", "help", {"k"});
  auto b = r.AddCounter("x_total", "help", {"k"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(r.AddGauge("x_total", "help", {"k"}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(r.AddCounter("x_total", "help", {"other"}).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(r.AddHistogram("h", "help", {1, 2}).ok());
  EXPECT_FALSE(r.AddHistogram("h", "help", {1, 3}).ok());
  EXPECT_TRUE(r.AddHistogram("h", "help", {1, 2, std::numeric_limits<double>::infinity()}).ok());
}

TEST(MetricsTest, ChildPointersAreStable) {
  Registry r;
  auto& f = r.CounterOrDie("x_total", "", {"k"});
  Counter* first = f.WithLabels({"a"});
  for (int i = 0; i < 1000; ++i) f.WithLabels({std::to_string(i)});
  EXPECT_EQ(f.WithLabels({"a"}), first);
}

TEST(MetricsTest, CounterIgnoresNegativeIncrements) {
  Counter c;
  c.Increment(2);
  c.Increment(-1);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 2);
}

TEST(MetricsTest, HistogramValueEqualToBoundGoesToThatBucket) {
  Histogram h({0.1, 0.5, 1});
  h.Observe(0.1);  // == first bound
  h.Observe(0.10000000000000002);
  h.Observe(1);
  h.Observe(-5);
  h.Observe(2);
  h.Observe(std::nan(""));
  const auto s = h.Collect();
  EXPECT_THAT(s.cumulative, ::testing::ElementsAre(2, 3, 4, 6));
  EXPECT_EQ(s.count, 6u);
}

TEST(MetricsTest, BucketHelpers) {
  EXPECT_THAT(LinearBuckets(1, 2, 3), ::testing::ElementsAre(1, 3, 5));
  EXPECT_THAT(ExponentialBuckets(0.5, 2, 4), ::testing::ElementsAre(0.5, 1, 2, 4));
}

TEST(MetricsTest, CallbackGaugeEvaluatedAtScrapeAndRemovedWithHandle) {
  Registry r;
  auto& depth = r.GaugeOrDie("queue_depth", "Queued requests.", {"pool"});
  depth.WithLabels({"decode"})->Set(1);
  int queued = 5;
  {
    CallbackHandle h = depth.AddCallback({"prefill"}, [&] { return double(queued); });
    queued = 7;
    EXPECT_THAT(r.Serialize(), HasSubstr("queue_depth{pool=\"prefill\"} 7\n"));
    // A callback replaces a regular child with the same labels.
    CallbackHandle h2 = depth.AddCallback({"decode"}, [] { return 9.0; });
    const std::string text = r.Serialize();
    EXPECT_THAT(text, HasSubstr("queue_depth{pool=\"decode\"} 9\n"));
    EXPECT_THAT(text, ::testing::Not(HasSubstr("queue_depth{pool=\"decode\"} 1\n")));
  }
  EXPECT_EQ(r.Serialize(),
            "# HELP queue_depth Queued requests.\n"
            "# TYPE queue_depth gauge\n"
            "queue_depth{pool=\"decode\"} 1\n");
}

TEST(MetricsTest, ConcurrentUpdatesFromEightThreadsSum) {
  Registry r;
  auto& counters = r.CounterOrDie("ops_total", "", {"kind"});
  auto& gauge = r.GaugeOrDie("level", "");
  auto& hist = r.HistogramOrDie("size_bytes", "", {10, 100});
  constexpr int kThreads = 8, kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        counters.WithLabels({i % 2 ? "odd" : "even"})->Increment();
        gauge.Default()->Increment(t % 2 ? 1 : -1);
        hist.Default()->Observe(i % 3 == 0 ? 5 : 50);
        if (i % 1000 == 0) r.Serialize();  // scrapes race with updates
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(counters.WithLabels({"odd"})->Value(), kThreads * kIters / 2);
  EXPECT_EQ(counters.WithLabels({"even"})->Value(), kThreads * kIters / 2);
  EXPECT_EQ(gauge.Default()->Value(), 0);
  const auto s = hist.Default()->Collect();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kIters);
  EXPECT_EQ(s.cumulative[0], uint64_t{kThreads} * ((kIters + 2) / 3));
}

TEST(MetricsTest, DefaultRegistryIsShared) {
  auto& a = Registry::Default().CounterOrDie("strata_metrics_test_total", "test");
  auto& b = Registry::Default().CounterOrDie("strata_metrics_test_total", "test");
  EXPECT_EQ(&a, &b);
  EXPECT_THAT(Registry::Default().Serialize(), HasSubstr("strata_metrics_test_total 0\n"));
}

TEST(MetricsDeathTest, WrongLabelCountCrashes) {
  Registry r;
  auto& f = r.CounterOrDie("x_total", "", {"a", "b"});
  EXPECT_DEATH(f.WithLabels({"only-one"}), "has 2 labels");
}

}  // namespace
}  // namespace strata::metrics
