// The registry's output judged by Prometheus itself: `promtool check metrics` on every metric
// type, and a real Prometheus server scraping a registry and answering a query about it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "raw_http.h"
#include "strata/common/metrics.h"

namespace strata::metrics {
namespace {

namespace fs = std::filesystem;
using testing::HttpGet;
using testing::PickFreePort;
using testing::RawHttpServer;

constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kPrometheus[] = "/usr/bin/prometheus";

fs::path MakeTempDir() {
  std::string tmpl = (fs::temp_directory_path() / "strata-metrics-XXXXXX").string();
  return fs::path(mkdtemp(tmpl.data()));
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A registry with every metric type, labels, escaping and special values. The callback stays
// registered while the returned handle lives.
[[nodiscard]] CallbackHandle Populate(Registry& r) {
  auto& req = r.CounterOrDie("strata_test_requests_total", "Requests by code.", {"code"});
  req.WithLabels({"200"})->Increment(42);
  req.WithLabels({"500"})->Increment();
  r.GaugeOrDie("strata_test_queue_depth", "Queued \\ requests\nby pool.", {"pool"})
      .WithLabels({"with \"quotes\"\nand newline"})
      ->Set(-3.5);
  r.GaugeOrDie("strata_test_free_ratio", "A NaN gauge.").Default()->Set(std::nan(""));
  CallbackHandle cb = r.GaugeOrDie("strata_test_callback", "From a callback.", {"k"})
                          .AddCallback({"v"}, [] { return 1e21; });
  auto& lat = r.HistogramOrDie("strata_test_latency_seconds", "Latency.",
                               ExponentialBuckets(0.001, 10, 4), {"route"});
  for (double v : {0.0005, 0.001, 0.05, 2.0, 30.0}) lat.WithLabels({"/v1/completions"})->Observe(v);
  lat.WithLabels({"/v1/models"});
  return cb;
}

TEST(PrometheusTest, PromtoolAcceptsEveryMetricType) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " is not installed";
  Registry r;
  CallbackHandle cb = Populate(r);
  const fs::path dir = MakeTempDir();
  const fs::path file = dir / "metrics.txt";
  std::ofstream(file) << r.Serialize();
  const std::string cmd =
      std::string(kPromtool) + " check metrics < " + file.string() + " > " +
      (dir / "out.txt").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = ReadAll(dir / "out.txt");
  EXPECT_EQ(rc, 0) << out << "\n--- input ---\n" << r.Serialize();
  EXPECT_EQ(out, "");  // no lint warnings either
  fs::remove_all(dir);
}

// Starts prometheus with stdout/stderr in `log`; returns its pid.
pid_t StartPrometheus(const fs::path& dir, int web_port, const fs::path& log) {
  const std::string config = "--config.file=" + (dir / "prometheus.yml").string();
  const std::string storage = "--storage.tsdb.path=" + (dir / "data").string();
  const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(web_port);
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f == nullptr) _exit(126);
    dup2(STDOUT_FILENO, STDERR_FILENO);
    execl(kPrometheus, kPrometheus, config.c_str(), storage.c_str(), listen.c_str(),
          "--log.level=warn", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

void StopProcess(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// The value of an instant query's first sample, or "" if there is none yet.
std::string QueryValue(int port, const std::string& promql_escaped) {
  std::string body;
  if (HttpGet(port, "/api/v1/query?query=" + promql_escaped, &body) != 200) return "";
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || j["status"] != "success") return "";
  const auto& result = j["data"]["result"];
  if (!result.is_array() || result.empty()) return "";
  return result[0]["value"][1].get<std::string>();
}

TEST(PrometheusTest, RealServerScrapesAndQueries) {
  if (access(kPrometheus, X_OK) != 0) GTEST_SKIP() << kPrometheus << " is not installed";
  Registry r;
  CallbackHandle cb = Populate(r);
  RawHttpServer target([&r] { return r.Serialize(); });
  const fs::path dir = MakeTempDir();
  std::ofstream(dir / "prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
         "scrape_configs:\n  - job_name: strata\n    static_configs:\n"
         "      - targets: ['127.0.0.1:" << target.port() << "']\n";
  const int web_port = PickFreePort();
  const pid_t pid = StartPrometheus(dir, web_port, dir / "prometheus.log");
  ASSERT_GT(pid, 0);

  // up == 1 once a scrape succeeded; then the counter's value must be what we set.
  std::string up, requests, count;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    up = QueryValue(web_port, "up%7Bjob%3D%22strata%22%7D");
    if (up == "1") {
      requests = QueryValue(web_port, "strata_test_requests_total%7Bcode%3D%22200%22%7D");
      count = QueryValue(web_port, "strata_test_latency_seconds_count%7Broute%3D%22%2Fv1%2Fcompletions%22%7D");
      if (!requests.empty() && !count.empty()) break;
    }
    ASSERT_EQ(waitpid(pid, nullptr, WNOHANG), 0) << ReadAll(dir / "prometheus.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  StopProcess(pid);
  EXPECT_EQ(up, "1") << ReadAll(dir / "prometheus.log");
  EXPECT_EQ(requests, "42");
  EXPECT_EQ(count, "5");
  EXPECT_GT(target.requests(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::metrics
