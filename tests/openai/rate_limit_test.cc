// openai::RateLimiter and ParseRateLimit with a test clock: token buckets per API key for
// requests and tokens per minute, refills over time, refunds, and the charge above a whole
// minute's allowance.
#include "strata/openai/rate_limit.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::openai {
namespace {

using ::testing::HasSubstr;

class RateLimiterTest : public ::testing::Test {
 protected:
  RateLimiter Make(RateLimit def, std::vector<std::optional<RateLimit>> per_key = {}) {
    return RateLimiter(def, std::move(per_key), [this] { return now_; });
  }
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(RateLimiterTest, RequestsPerMinuteRefillContinuously) {
  RateLimiter r = Make({.requests_per_minute = 2});
  EXPECT_TRUE(r.Admit(-1, 0).admitted);
  EXPECT_TRUE(r.Admit(-1, 0).admitted);
  RateLimiter::Decision d = r.Admit(-1, 0);
  EXPECT_FALSE(d.admitted);
  EXPECT_NEAR(d.retry_after_s, 30, 1e-6);  // one request every 30 s
  EXPECT_THAT(d.reason, HasSubstr("requests per minute (limit 2)"));
  now_ += absl::Seconds(29);
  EXPECT_FALSE(r.Admit(-1, 0).admitted);
  now_ += absl::Seconds(1);
  EXPECT_TRUE(r.Admit(-1, 0).admitted);
  // Idle time fills the bucket only up to one minute's allowance.
  now_ += absl::Hours(1);
  EXPECT_TRUE(r.Admit(-1, 0).admitted);
  EXPECT_TRUE(r.Admit(-1, 0).admitted);
  EXPECT_FALSE(r.Admit(-1, 0).admitted);
}

TEST_F(RateLimiterTest, TokensAreChargedAndRefunded) {
  RateLimiter r = Make({.tokens_per_minute = 600});
  EXPECT_TRUE(r.Admit(-1, 500).admitted);
  RateLimiter::Decision d = r.Admit(-1, 200);
  EXPECT_FALSE(d.admitted);
  EXPECT_NEAR(d.retry_after_s, 10, 1e-6);  // 100 more tokens at 10 a second
  EXPECT_THAT(d.reason, HasSubstr("tokens per minute (limit 600, this request needs 200)"));
  r.Refund(-1, 150);  // the first request used less than it was charged
  EXPECT_TRUE(r.Admit(-1, 200).admitted);
  r.Refund(-1, 100000);  // never above the allowance
  EXPECT_TRUE(r.Admit(-1, 600).admitted);
  EXPECT_FALSE(r.Admit(-1, 1).admitted);
}

TEST_F(RateLimiterTest, AChargeAboveTheAllowanceCanNeverBeAdmitted) {
  RateLimiter r = Make({.tokens_per_minute = 100});
  RateLimiter::Decision d = r.Admit(-1, 101);
  EXPECT_FALSE(d.admitted);
  EXPECT_TRUE(d.exceeds_allowance);
  EXPECT_THAT(d.reason, HasSubstr("101 tokens"));
  EXPECT_TRUE(r.Admit(-1, 100).admitted);
}

TEST_F(RateLimiterTest, EachKeyHasItsOwnBuckets) {
  RateLimiter r = Make({.requests_per_minute = 1}, {std::nullopt, RateLimit{3, 0}});
  EXPECT_FALSE(r.unlimited());
  EXPECT_TRUE(r.Admit(0, 0).admitted);   // key 0: the default, 1 a minute
  EXPECT_FALSE(r.Admit(0, 0).admitted);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r.Admit(1, 0).admitted);  // key 1: 3 a minute
  EXPECT_FALSE(r.Admit(1, 0).admitted);
  EXPECT_TRUE(r.Admit(-1, 0).admitted);  // no key: a bucket of its own
  EXPECT_FALSE(r.Admit(-1, 0).admitted);
  EXPECT_FALSE(r.Admit(5, 0).admitted);  // an index past the keys counts as no key
}

TEST_F(RateLimiterTest, NoLimitsAdmitEverything) {
  RateLimiter r = Make({}, {std::nullopt});
  EXPECT_TRUE(r.unlimited());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(r.Admit(0, 1 << 30).admitted);
}

TEST(ParseRateLimitTest, AcceptsRpmAndTpmAndNamesWhatIsWrong) {
  auto both = ParseRateLimit("rpm:600, tpm:2e5");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->requests_per_minute, 600);
  EXPECT_EQ(both->tokens_per_minute, 200000);
  auto one = ParseRateLimit("tpm:50");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->requests_per_minute, 0);
  for (const char* bad : {"", "rpm", "rpm:0", "rpm:-1", "rpm:x", "rps:5", "rpm:nan", "rpm:inf"}) {
    auto r = ParseRateLimit(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseRateLimit("rps:5").status().message()), HasSubstr("'rps'"));
}

}  // namespace
}  // namespace strata::openai
