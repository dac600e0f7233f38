// The front end's Prometheus metrics: unrecognized request fields counted by name, with a
// bounded label set.
#include "strata/openai/api_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ApiMetricsTest, UnknownParamsAreCountedWhenServedWithBoundedLabels) {
  metrics::Registry registry;
  ApiMetrics m(registry, "strata_test");
  RequestRecord served;
  served.endpoint = "/v1/completions";
  served.unknown_params = {"priority", "rid"};
  m.OnFinished(served);
  m.OnFinished(served);
  RequestRecord rejected = served;
  rejected.http_status = 404;
  rejected.failed = true;
  m.OnFinished(rejected);  // not served: nothing was served without those fields
  std::string text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("strata_test_unknown_params_total{param=\"priority\"} 2"));
  EXPECT_THAT(text, HasSubstr("strata_test_unknown_params_total{param=\"rid\"} 2"));

  for (size_t i = 0; i < ApiMetrics::kMaxParamLabels + 5; ++i) {
    RequestRecord r;
    r.endpoint = "/v1/completions";
    r.unknown_params = {"f" + std::to_string(i)};
    m.OnFinished(r);
  }
  text = registry.Serialize();
  // Two labels were taken already: f0..f29 get their own, the remaining 7 share "_other".
  EXPECT_THAT(text, HasSubstr("{param=\"f29\"} 1"));
  EXPECT_THAT(text, Not(HasSubstr("{param=\"f30\"}")));
  EXPECT_THAT(text, HasSubstr("strata_test_unknown_params_total{param=\"_other\"} 7"));
}

}  // namespace
}  // namespace strata::openai
