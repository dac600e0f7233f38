// The `strata up` supervisor driving fake servers (testdata/fake_server.py): readiness, early
// exits, stop order, SIGKILL after the grace period, orphan cleanup, and the cluster plan.
#include "supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/http/server.h"
#include "strata/proto/certificates.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kFake[] = STRATA_SOURCE_DIR "/tests/config/testdata/fake_server.py";

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
    std::string tmpl = (fs::temp_directory_path() / "strata-sup-XXXXXX").string();
    dir_ = mkdtemp(tmpl.data());
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // A fake server on a fresh port with the given extra flags.
  ProcessSpec Fake(const std::string& name, std::vector<std::string> flags = {}) {
    auto ports = PickFreePorts("127.0.0.1", 1);
    EXPECT_TRUE(ports.ok());
    const int port = (*ports)[0];
    std::vector<std::string> argv = {kPython, kFake, "--port", std::to_string(port), "--name",
                                     name, "--order-file", (dir_ / "order.txt").string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return ProcessSpec{name, argv, "http://127.0.0.1:" + std::to_string(port) + "/ready",
                       (dir_ / (name + ".log")).string()};
  }

  std::vector<std::string> StopOrder() {
    std::ifstream in(dir_ / "order.txt");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  static SupervisorOptions Fast() {
    SupervisorOptions o;
    o.poll_interval = absl::Milliseconds(20);
    o.ready_timeout = absl::Seconds(30);
    o.grace = absl::Seconds(10);
    return o;
  }

  fs::path dir_;
};

TEST_F(SupervisorTest, WaitsUntilEveryProcessIsReady) {
  Supervisor sup(Fast());
  ProcessSpec a = Fake("router", {"--ready-after", "0.4"});
  ProcessSpec b = Fake("decode-0");
  ASSERT_TRUE(sup.Start({a}).ok());
  ASSERT_TRUE(sup.Start({b}).ok());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(sup.WaitReady().ok());
  // The router reports 503 for its first 0.4 s: ready cannot have been seen earlier.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  for (const auto* spec : {&a, &b}) {
    const int port = std::stoi(spec->ready_url.substr(spec->ready_url.rfind(':') + 1));
    auto code = HttpGetStatus("127.0.0.1", port, "/ready", absl::Seconds(2));
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, 200);
  }
  EXPECT_EQ(sup.running(), 2u);
  const auto exits = sup.Stop();
  EXPECT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    EXPECT_FALSE(e.killed);
    EXPECT_EQ(e.Describe(), "exited with status 0");
  }
}

TEST_F(SupervisorTest, EarlyExitFailsWithLogTail) {
  Supervisor sup(Fast());
  ASSERT_TRUE(sup.Start({Fake("router")}).ok());
  ASSERT_TRUE(sup.Start({Fake("decode-0", {"--ready-after", "100", "--exit-after", "0.2",
                                           "--exit-code", "3"})})
                  .ok());
  const pid_t router = sup.pid("router");
  const absl::Status st = sup.WaitReady();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("decode-0 exited with status 3 before the cluster was ready"));
  EXPECT_THAT(st.message(), HasSubstr("fatal: decode-0 broke on purpose"));
  EXPECT_THAT(st.message(), HasSubstr((dir_ / "decode-0.log").string()));
  EXPECT_EQ(sup.running(), 1u);
  sup.Stop();
  EXPECT_FALSE(Alive(router));
}

TEST_F(SupervisorTest, TimesOutNamingProcessesNotReady) {
  SupervisorOptions o = Fast();
  o.ready_timeout = absl::Milliseconds(500);
  Supervisor sup(o);
  ASSERT_TRUE(sup.Start({Fake("router"), Fake("prefill-0", {"--ready-after", "100"})}).ok());
  const absl::Status st = sup.WaitReady();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), HasSubstr(": prefill-0"));
  EXPECT_THAT(st.message(), ::testing::Not(HasSubstr("router")));
}

TEST_F(SupervisorTest, InterruptCancelsWaiting) {
  SupervisorOptions o = Fast();
  o.interrupted = [] { return true; };
  Supervisor sup(o);
  ASSERT_TRUE(sup.Start({Fake("router", {"--ready-after", "100"})}).ok());
  EXPECT_EQ(sup.WaitReady().code(), absl::StatusCode::kCancelled);
}

TEST_F(SupervisorTest, StopsWorkersBeforeRouterAndLeavesNothing) {
  Supervisor sup(Fast());
  ASSERT_TRUE(sup.Start({Fake("router")}).ok());
  ASSERT_TRUE(sup.Start({Fake("prefill-0", {"--term-delay", "0.2"}), Fake("decode-0")}).ok());
  ASSERT_TRUE(sup.WaitReady().ok());
  const std::vector<pid_t> pids = {sup.pid("router"), sup.pid("prefill-0"), sup.pid("decode-0")};
  sup.Stop();
  const auto order = StopOrder();
  ASSERT_EQ(order.size(), 3u);
  // Workers are told first and must be gone (prefill-0 drains for 0.2 s) before the router is.
  EXPECT_THAT(std::vector<std::string>(order.begin(), order.begin() + 2),
              UnorderedElementsAre("prefill-0", "decode-0"));
  EXPECT_EQ(order[2], "router");
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << pid;
  EXPECT_EQ(sup.running(), 0u);
}

TEST_F(SupervisorTest, KillsProcessesThatIgnoreSigtermAfterGrace) {
  SupervisorOptions o = Fast();
  o.grace = absl::Milliseconds(300);
  Supervisor sup(o);
  ASSERT_TRUE(sup.Start({Fake("router")}).ok());
  ASSERT_TRUE(sup.Start({Fake("decode-0", {"--ignore-term"})}).ok());
  ASSERT_TRUE(sup.WaitReady().ok());
  const pid_t stubborn = sup.pid("decode-0");
  const auto exits = sup.Stop();
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    EXPECT_EQ(e.killed, e.name == "decode-0") << e.name;
    EXPECT_THAT(e.Describe(), HasSubstr(e.name == "decode-0" ? "killed by signal 9"
                                                              : "exited with status 0"));
  }
  // It saw SIGTERM; the router was told only once the worker was gone, and exited by itself.
  EXPECT_THAT(StopOrder(), ElementsAre("decode-0", "router"));
  EXPECT_FALSE(Alive(stubborn));
}

TEST_F(SupervisorTest, ReportsUnexpectedExitWhileServing) {
  Supervisor sup(Fast());
  ASSERT_TRUE(sup.Start({Fake("router"), Fake("decode-0")}).ok());
  ASSERT_TRUE(sup.WaitReady().ok());
  kill(sup.pid("decode-0"), SIGKILL);
  std::vector<ExitInfo> exits;
  for (int i = 0; i < 500 && exits.empty(); ++i) {
    exits = sup.ReapExited();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].name, "decode-0");
  EXPECT_THAT(exits[0].Describe(), HasSubstr("killed by signal 9"));
  EXPECT_EQ(sup.running(), 1u);
}

TEST_F(SupervisorTest, RestartsAReapedProcessOnItsPortWithItsLogKept) {
  Supervisor sup(Fast());
  const ProcessSpec worker = Fake("prefill-0", {"--ready-after", "0.3"});
  ASSERT_TRUE(sup.Start({Fake("router"), worker}).ok());
  ASSERT_TRUE(sup.WaitReady().ok());
  EXPECT_FALSE(sup.Restart("prefill-0").ok());  // still running
  EXPECT_EQ(sup.Restart("nobody").code(), absl::StatusCode::kNotFound);
  const pid_t first = sup.pid("prefill-0");
  kill(first, SIGKILL);
  std::vector<ExitInfo> exits;
  for (int i = 0; i < 500 && exits.empty(); ++i) {
    exits = sup.ReapExited();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_GT(exits[0].ran, absl::Milliseconds(300));  // it was ready, so it ran that long
  ASSERT_TRUE(sup.Restart("prefill-0").ok());
  const pid_t second = sup.pid("prefill-0");
  EXPECT_NE(second, 0);
  EXPECT_NE(second, first);
  EXPECT_EQ(sup.running(), 2u);
  // Not ready for its first 0.3 s, then PollReady reports it once.
  std::vector<std::string> ready;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 500 && ready.empty(); ++i) {
    ready = sup.PollReady();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_THAT(ready, ElementsAre("prefill-0"));
  EXPECT_TRUE(sup.PollReady().empty());
  // Same port: the spec is reused as it was.
  const int port = std::stoi(worker.ready_url.substr(worker.ready_url.rfind(':') + 1));
  auto code = HttpGetStatus("127.0.0.1", port, "/ready", absl::Seconds(2));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 200);
  // The log holds both runs, the second after a marker line.
  std::ifstream in(worker.log_path);
  std::stringstream log;
  log << in.rdbuf();
  EXPECT_THAT(log.str(), HasSubstr("---- strata up: prefill-0 started again (restart 1)"));
  // Stop() ends the restarted process too.
  const auto stopped = sup.Stop();
  EXPECT_EQ(stopped.size(), 2u);
  EXPECT_FALSE(Alive(second));
}

ExitInfo Ended(int wait_status, absl::Duration ran) {
  ExitInfo e;
  e.name = "decode-0";
  e.wait_status = wait_status;
  e.ran = ran;
  return e;
}

constexpr int kKilled = SIGKILL;  // a wait status: killed by signal 9
constexpr int kExit1 = 1 << 8;    // exited with status 1
constexpr int kExit0 = 0;         // exited with status 0

TEST(RestartTrackerTest, OnFailureBacksOffDoublingAndGivesUpAfterARowOfQuickFailures) {
  RestartRules rules;
  rules.max_consecutive = 4;
  rules.first_delay = absl::Seconds(1);
  rules.max_delay = absl::Seconds(5);
  RestartTracker t(rules);
  std::string why;
  std::vector<absl::Duration> delays;
  for (int i = 0; i < 4; ++i) {
    auto d = t.OnExit(Ended(i % 2 ? kExit1 : kKilled, absl::Seconds(2)), &why);
    ASSERT_TRUE(d.has_value()) << i;
    delays.push_back(*d);
  }
  EXPECT_THAT(delays,
              ElementsAre(absl::Seconds(1), absl::Seconds(2), absl::Seconds(4), absl::Seconds(5)));
  EXPECT_EQ(t.in_a_row(), 4);
  EXPECT_FALSE(t.OnExit(Ended(kKilled, absl::Seconds(2)), &why).has_value());
  EXPECT_THAT(why, HasSubstr("5 times in a row"));
  // A run past stable_after starts a new row at the first delay.
  auto d = t.OnExit(Ended(kKilled, absl::Minutes(2)), &why);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, absl::Seconds(1));
  EXPECT_EQ(t.in_a_row(), 1);
}

TEST(RestartTrackerTest, PoliciesDecideWhichEndsRestart) {
  std::string why;
  RestartTracker on_failure;  // the default
  EXPECT_FALSE(on_failure.OnExit(Ended(kExit0, absl::Seconds(2)), &why).has_value());
  EXPECT_THAT(why, HasSubstr("status 0"));
  EXPECT_TRUE(on_failure.OnExit(Ended(kKilled, absl::Seconds(2)), &why).has_value());
  RestartRules always_rules;
  always_rules.policy = "always";
  RestartTracker always(always_rules);
  EXPECT_TRUE(always.OnExit(Ended(kExit0, absl::Seconds(2)), &why).has_value());
  RestartRules never_rules;
  never_rules.policy = "never";
  RestartTracker never(never_rules);
  EXPECT_FALSE(never.OnExit(Ended(kKilled, absl::Seconds(2)), &why).has_value());
  EXPECT_THAT(why, HasSubstr("never"));
}

TEST_F(SupervisorTest, UnrunnableCommandIsAnError) {
  Supervisor sup(Fast());
  const absl::Status st =
      sup.Start({ProcessSpec{"router", {"/nonexistent/strata"}, "", (dir_ / "r.log").string()}});
  EXPECT_THAT(st.message(), HasSubstr("cannot run /nonexistent/strata: No such file"));
  const absl::Status log =
      sup.Start({ProcessSpec{"router", {kPython}, "", "/nonexistent/dir/r.log"}});
  EXPECT_THAT(log.message(), HasSubstr("cannot open log /nonexistent/dir/r.log"));
  EXPECT_EQ(sup.running(), 0u);
}

// If the supervisor is SIGKILLed, PR_SET_PDEATHSIG still ends its children.
TEST_F(SupervisorTest, ChildrenDieWithSupervisor) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // orphans come to us, so we can reap them
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const ProcessSpec spec = Fake("router");
  const pid_t middle = fork();
  if (middle == 0) {
    Supervisor sup(Fast());
    if (!sup.Start({spec}).ok() || !sup.WaitReady().ok()) _exit(1);
    const pid_t child = sup.pid("router");
    if (write(fds[1], &child, sizeof(child)) != sizeof(child)) _exit(1);
    pause();
    _exit(0);
  }
  close(fds[1]);
  pid_t child = 0;
  ASSERT_EQ(read(fds[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  close(fds[0]);
  ASSERT_TRUE(Alive(child));
  kill(middle, SIGKILL);
  ASSERT_EQ(waitpid(middle, nullptr, 0), middle);
  // The orphan gets SIGTERM from the kernel and exits; it was reparented to us (subreaper).
  int status = 0;
  pid_t reaped = 0;
  for (int i = 0; i < 1000 && reaped == 0; ++i) {
    reaped = waitpid(child, &status, WNOHANG);
    if (reaped == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  EXPECT_EQ(reaped, child);
  EXPECT_FALSE(Alive(child));
}

TEST(SupervisorHelpersTest, PickFreePortsAreDistinctAndBindable) {
  auto ports = PickFreePorts("127.0.0.1", 5);
  ASSERT_TRUE(ports.ok()) << ports.status();
  ASSERT_EQ(ports->size(), 5u);
  std::set<int> unique(ports->begin(), ports->end());
  EXPECT_EQ(unique.size(), 5u);
  for (int p : *ports) EXPECT_GT(p, 0);
  EXPECT_FALSE(PickFreePorts("no-such-host.invalid", 1).ok());
}

TEST(SupervisorHelpersTest, HttpGetStatusOfClosedPortIsUnavailable) {
  auto ports = PickFreePorts("127.0.0.1", 1);
  ASSERT_TRUE(ports.ok());
  EXPECT_EQ(HttpGetStatus("127.0.0.1", (*ports)[0], "/ready", absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ClusterPlanTest, BuildsRouterAndWorkerCommands) {
  ClusterConfig c;
  c.host = "0.0.0.0";
  c.router.http_port = 8000;
  c.router.grpc_port = 9000;
  c.prefill.count = 1;
  c.decode.count = 1;
  c.mixed.count = 1;
  c.engine.num_kv_blocks = 128;
  c.api_keys = {"k1", "k2"};
  auto planned =
      PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}, {8103, 9103}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const ClusterPlan& plan = *planned;
  ASSERT_EQ(plan.router.size(), 1u);
  EXPECT_THAT(plan.router[0].argv,
              ElementsAre("/bin/strata", "router", "--host", "0.0.0.0", "--http-port", "8000",
                          "--grpc-port", "9000", "--model", "/models/m",
                          "--served-model-name", "tiny-llama", "--policy", "kv-aware", "--api-key", "k1", "--api-key", "k2", "--slo-ttft", "2",
                          "--slo-tpot", "0.2"));
  EXPECT_EQ(plan.router[0].ready_url, "http://127.0.0.1:8000/ready");
  EXPECT_EQ(plan.router[0].log_path, "/logs/router.log");
  EXPECT_EQ(plan.url, "http://127.0.0.1:8000/v1");
  ASSERT_EQ(plan.workers.size(), 3u);
  EXPECT_EQ(plan.workers[0].name, "prefill-0");
  EXPECT_EQ(plan.workers[1].name, "decode-0");
  EXPECT_EQ(plan.workers[2].name, "mixed-0");
  EXPECT_THAT(plan.workers[1].argv,
              ElementsAre("/bin/strata", "worker", "--role", "decode", "--id", "decode-0",
                          "--host", "0.0.0.0", "--http-port", "8102", "--grpc-port", "9102",
                          "--router", "127.0.0.1:9000", "--model", "/models/m",
                          "--served-model-name", "tiny-llama", "--plugin", "cpu", "--block-size",
                          "16", "--api-key", "k1", "--api-key", "k2", "--num-kv-blocks", "128", "--max-num-seqs", "64",
                          "--max-num-batched-tokens", "512"));
  EXPECT_EQ(plan.workers[2].ready_url, "http://127.0.0.1:8103/ready");
  EXPECT_EQ(plan.workers[2].log_path, "/logs/mixed-0.log");
  EXPECT_TRUE(plan.kvstores.empty());
}

// The index of `flag` followed by `value` in argv, or -1.
int FlagAt(const std::vector<std::string>& argv, const std::string& flag,
           const std::string& value);

// Two models: the router serves both (the first with --model, the other with --serve-model),
// each model's workers carry its name, directory and plugin, and their ids name the model.
TEST(ClusterPlanTest, SeveralModelsGiveTheRouterEachModelAndEachWorkerItsOwn) {
  ClusterConfig c;
  c.router.http_port = 8000;
  c.router.grpc_port = 9000;
  ClusterConfig::ModelPool a;
  a.name = "org/llama";  // a name with '/' gives ids with '-'
  a.model = "/models/llama";
  a.prefill.count = 1;
  ClusterConfig::ModelPool b;
  b.name = "moe";
  b.model = "/models/moe";
  b.plugin = "/opt/libother.so";
  b.profile = "/profiles/moe";
  b.decode.count = 0;
  b.mixed.count = 1;
  c.models = {a, b};
  ASSERT_TRUE(ValidateClusterConfig(c).ok()) << ValidateClusterConfig(c);
  auto planned = PlanCluster(c, "/bin/strata", "/models/llama", "/logs",
                             {{8101, 9101}, {8102, 9102}, {8103, 9103}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const ClusterPlan& plan = *planned;
  const auto& router = plan.router[0].argv;
  EXPECT_GE(FlagAt(router, "--model", "/models/llama"), 0);
  EXPECT_GE(FlagAt(router, "--served-model-name", "org/llama"), 0);
  EXPECT_GE(FlagAt(router, "--serve-model", "moe=/models/moe"), 0);
  EXPECT_GE(FlagAt(router, "--model-profile", "moe=/profiles/moe"), 0);
  EXPECT_EQ(FlagAt(router, "--serve-model", "org/llama=/models/llama"), -1);
  ASSERT_EQ(plan.workers.size(), 3u);
  EXPECT_EQ(plan.workers[0].name, "org-llama-prefill-0");
  EXPECT_EQ(plan.workers[1].name, "org-llama-decode-0");
  EXPECT_EQ(plan.workers[1].log_path, "/logs/org-llama-decode-0.log");
  EXPECT_EQ(plan.workers[2].name, "moe-mixed-0");
  EXPECT_EQ(plan.workers[2].log_path, "/logs/moe-mixed-0.log");
  const auto& moe = plan.workers[2].argv;
  EXPECT_GE(FlagAt(moe, "--id", "moe-mixed-0"), 0);
  EXPECT_GE(FlagAt(moe, "--model", "/models/moe"), 0);
  EXPECT_GE(FlagAt(moe, "--served-model-name", "moe"), 0);
  EXPECT_GE(FlagAt(moe, "--plugin", "/opt/libother.so"), 0);
  EXPECT_GE(FlagAt(moe, "--http-port", "8103"), 0);
  const auto& llama = plan.workers[1].argv;
  EXPECT_GE(FlagAt(llama, "--served-model-name", "org/llama"), 0);
  EXPECT_GE(FlagAt(llama, "--plugin", "cpu"), 0);
}

int FlagAt(const std::vector<std::string>& argv, const std::string& flag,
           const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag && argv[i + 1] == value) return static_cast<int>(i);
  }
  return -1;
}

TEST(ClusterPlanTest, SeveralRoutersRunOnTheirOwnPortsAndEveryProcessRegistersWithEach) {
  ClusterConfig c;
  c.router.http_port = 8000;
  c.router.replicas = 2;
  c.prefill.count = 1;
  c.decode.count = 1;
  c.kv_tiers.host_mb = 64;
  c.kv_tiers.kvstore_count = 1;
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs",
                             {{8101, 9101}, {8102, 9102}, {8103, 9103}},
                             {{8201, 9201}, {8202, 9202}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const ClusterPlan& plan = *planned;
  ASSERT_EQ(plan.router.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const ProcessSpec& r = plan.router[size_t(i)];
    EXPECT_EQ(r.name, absl::StrCat("router-", i));
    EXPECT_GE(FlagAt(r.argv, "--http-port", absl::StrCat(8201 + i)), 0);
    EXPECT_GE(FlagAt(r.argv, "--grpc-port", absl::StrCat(9201 + i)), 0);
    EXPECT_EQ(r.ready_url, absl::StrCat("http://127.0.0.1:", 8201 + i, "/ready"));
    EXPECT_EQ(r.log_path, absl::StrCat("/logs/router-", i, ".log"));
  }
  EXPECT_THAT(plan.front_backends, ElementsAre("127.0.0.1:8201", "127.0.0.1:8202"));
  EXPECT_EQ(plan.url, "http://127.0.0.1:8000/v1");  // the front's port
  ASSERT_EQ(plan.workers.size(), 2u);
  ASSERT_EQ(plan.kvstores.size(), 1u);
  for (const ProcessSpec* p : {&plan.workers[0], &plan.workers[1], &plan.kvstores[0]}) {
    EXPECT_GE(FlagAt(p->argv, "--router", "127.0.0.1:9201,127.0.0.1:9202"), 0) << p->name;
  }
  // Router ports that do not match the replicas are an error, not a guess.
  EXPECT_FALSE(PlanCluster(c, "/bin/strata", "/models/m", "/logs",
                           {{8101, 9101}, {8102, 9102}, {8103, 9103}}, {{8201, 9201}})
                   .ok());
}

TEST(ClusterPlanTest, StallAndStreamIdleTimeoutsReachTheirProcessesWhenSet) {
  ClusterConfig c;
  c.mixed.count = 1;
  c.prefill.count = 0;
  c.decode.count = 0;
  c.router.worker_stream_idle_timeout_s = 2.5;
  c.router.resume_settle_s = 4;
  c.engine.stall_timeout_s = 0;
  c.engine.detached_request_grace_s = 120;
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_GE(FlagAt(planned->router[0].argv, "--worker-stream-idle-timeout-s", "2.5"), 0);
  EXPECT_GE(FlagAt(planned->router[0].argv, "--resume-settle-s", "4"), 0);
  ASSERT_EQ(planned->workers.size(), 1u);
  EXPECT_GE(FlagAt(planned->workers[0].argv, "--engine-stall-timeout-s", "0"), 0);
  EXPECT_GE(FlagAt(planned->workers[0].argv, "--detached-request-grace-s", "120"), 0);
  // At their defaults the processes' own defaults apply: no flag.
  ClusterConfig plain;
  plain.mixed.count = 1;
  plain.prefill.count = 0;
  plain.decode.count = 0;
  planned = PlanCluster(plain, "/bin/strata", "/models/m", "/logs", {{8101, 9101}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_THAT(planned->router[0].argv,
              testing::Not(testing::Contains("--worker-stream-idle-timeout-s")));
  EXPECT_THAT(planned->workers[0].argv,
              testing::Not(testing::Contains("--engine-stall-timeout-s")));
  EXPECT_THAT(planned->router[0].argv, testing::Not(testing::Contains("--resume-settle-s")));
  EXPECT_THAT(planned->workers[0].argv,
              testing::Not(testing::Contains("--detached-request-grace-s")));
}

TEST(ClusterPlanTest, TenantIsolationFlagsReachTheRouterAndEveryWorker) {
  ClusterConfig c;
  c.mixed.count = 1;
  c.api_keys = {"k1", "k2", "k3"};
  c.api_key_cache_salts = {"", "tenant-b"};
  c.hide_cached_tokens = true;
  c.kv_hash_key_file = "/logs/kv_hash.key";
  c.rate_limit = "rpm:60";
  c.api_key_rate_limits = {"", "", "tpm:900"};
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs",
                             {{8101, 9101}, {8102, 9102}, {8103, 9103}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  std::vector<const ProcessSpec*> all = {&planned->router[0]};
  for (const auto& w : planned->workers) all.push_back(&w);
  ASSERT_EQ(all.size(), 4u);
  for (const ProcessSpec* p : all) {
    EXPECT_GE(FlagAt(p->argv, "--kv-hash-key-file", "/logs/kv_hash.key"), 0) << p->name;
    EXPECT_GE(FlagAt(p->argv, "--api-key-cache-salt", "key-1=tenant-b"), 0) << p->name;
    EXPECT_THAT(p->argv, testing::Contains("--hide-cached-tokens")) << p->name;
    EXPECT_EQ(std::count(p->argv.begin(), p->argv.end(), "--api-key-cache-salt"), 1) << p->name;
    EXPECT_GE(FlagAt(p->argv, "--rate-limit", "rpm:60"), 0) << p->name;
    EXPECT_GE(FlagAt(p->argv, "--api-key-rate-limit", "key-2=tpm:900"), 0) << p->name;
    EXPECT_EQ(std::count(p->argv.begin(), p->argv.end(), "--api-key-rate-limit"), 1) << p->name;
  }
  // Without them, no flag: the processes run unkeyed and unsalted.
  ClusterConfig plain;
  auto bare = PlanCluster(plain, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  ASSERT_TRUE(bare.ok());
  for (const auto& argv : {bare->router[0].argv, bare->workers[0].argv}) {
    EXPECT_THAT(argv, testing::Not(testing::Contains("--kv-hash-key-file")));
    EXPECT_THAT(argv, testing::Not(testing::Contains("--hide-cached-tokens")));
  }
}

TEST(ClusterPlanTest, TlsFlagsReachEveryProcessWhenOn) {
  ClusterConfig c;
  c.router.replicas = 2;
  c.kv_tiers.host_mb = 16;
  c.kv_tiers.kvstore_count = 1;
  c.tls.mode = "auto";
  c.tls.ca = "/logs/tls/ca.crt";
  c.tls.cert = "/logs/tls/tls.crt";
  c.tls.key = "/logs/tls/tls.key";
  const std::vector<std::pair<int, int>> workers = {{8101, 9101}, {8102, 9102}, {8103, 9103}};
  const std::vector<std::pair<int, int>> routers = {{8201, 9201}, {8202, 9202}};
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", workers, routers);
  ASSERT_TRUE(planned.ok()) << planned.status();
  std::vector<const ProcessSpec*> all;
  for (const auto* group : {&planned->router, &planned->kvstores, &planned->workers}) {
    for (const ProcessSpec& p : *group) all.push_back(&p);
  }
  ASSERT_EQ(all.size(), 5u);  // 2 routers, 1 daemon, prefill-0, decode-0
  for (const ProcessSpec* p : all) {
    EXPECT_GE(FlagAt(p->argv, "--tls-ca", "/logs/tls/ca.crt"), 0) << p->name;
    EXPECT_GE(FlagAt(p->argv, "--tls-cert", "/logs/tls/tls.crt"), 0) << p->name;
    EXPECT_GE(FlagAt(p->argv, "--tls-key", "/logs/tls/tls.key"), 0) << p->name;
  }
  c.tls = {};
  auto plain = PlanCluster(c, "/bin/strata", "/models/m", "/logs", workers, routers);
  ASSERT_TRUE(plain.ok());
  for (const auto* group : {&plain->router, &plain->kvstores, &plain->workers}) {
    for (const ProcessSpec& p : *group) {
      EXPECT_THAT(p.argv, testing::Not(testing::Contains("--tls-ca"))) << p.name;
    }
  }
}

TEST(ClusterPlanTest, HttpTlsReachesTheRoutersOnly) {
  ClusterConfig c;
  c.router.replicas = 2;
  c.router.http_tls.mode = "files";
  c.router.http_tls.cert = "/s/api.crt";
  c.router.http_tls.key = "/s/api.key";
  c.router.http_tls.client_ca = "/s/clients.crt";
  const std::vector<std::pair<int, int>> workers = {{8101, 9101}, {8102, 9102}};
  const std::vector<std::pair<int, int>> routers = {{8201, 9201}, {8202, 9202}};
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", workers, routers);
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_EQ(planned->url, "https://127.0.0.1:8000/v1");
  ASSERT_EQ(planned->router.size(), 2u);
  for (const ProcessSpec& p : planned->router) {
    EXPECT_GE(FlagAt(p.argv, "--http-tls-cert", "/s/api.crt"), 0) << p.name;
    EXPECT_GE(FlagAt(p.argv, "--http-tls-key", "/s/api.key"), 0) << p.name;
    EXPECT_GE(FlagAt(p.argv, "--http-tls-client-ca", "/s/clients.crt"), 0) << p.name;
    EXPECT_THAT(p.ready_url, testing::StartsWith("https://127.0.0.1:82")) << p.name;
  }
  for (const ProcessSpec& p : planned->workers) {
    EXPECT_THAT(p.argv, testing::Not(testing::Contains("--http-tls-cert"))) << p.name;
    EXPECT_THAT(p.ready_url, testing::StartsWith("http://")) << p.name;
  }
  c.router.http_tls = {};
  auto plain = PlanCluster(c, "/bin/strata", "/models/m", "/logs", workers, routers);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->url, "http://127.0.0.1:8000/v1");
  EXPECT_THAT(plain->router[0].argv, testing::Not(testing::Contains("--http-tls-cert")));
}

TEST(SupervisorHelpersTest, HttpGetStatusOverTls) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("supervisor_tls_" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto ca = proto::MakeCertificateAuthority("supervisor test CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok());
  auto leaf = proto::IssueLeafCertificate(*ca, proto::LeafSpec{});
  ASSERT_TRUE(leaf.ok());
  ASSERT_TRUE(proto::WritePrivateFile((dir / "tls.crt").string(), leaf->cert_pem, 0644).ok());
  ASSERT_TRUE(proto::WritePrivateFile((dir / "tls.key").string(), leaf->key_pem, 0600).ok());
  http::ServerOptions options;
  options.tls.cert_file = (dir / "tls.crt").string();
  options.tls.key_file = (dir / "tls.key").string();
  auto server = http::Server::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Route("GET", "/ready",
                   [](const http::Request&, auto w) { w->Respond(200, "text/plain", "ready"); });
  ASSERT_TRUE((*server)->Start().ok());
  const int port = (*server)->port();
  auto tls = HttpGetStatus("127.0.0.1", port, "/ready", absl::Seconds(5), /*tls=*/true);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_EQ(*tls, 200);
  // Plain HTTP to the TLS port: the server's 400, so a probe with the wrong scheme never passes.
  auto plain = HttpGetStatus("127.0.0.1", port, "/ready", absl::Seconds(5));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, 400);
  (*server)->Shutdown(absl::Seconds(1));
  fs::remove_all(dir);
}

TEST(ClusterPlanTest, PluginConfigReachesEveryWorker) {
  ClusterConfig c;
  c.engine.plugin_config = R"({"threads": 1})";
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const ClusterPlan& plan = *planned;
  ASSERT_EQ(plan.workers.size(), 2u);
  for (const auto& w : plan.workers) {
    EXPECT_THAT(w.argv, testing::Contains("--plugin-config")) << w.name;
    EXPECT_THAT(w.argv, testing::Contains(R"({"threads": 1})")) << w.name;
  }
  EXPECT_THAT(plan.router[0].argv, testing::Not(testing::Contains("--plugin-config")));
}

TEST(ClusterPlanTest, KvTiersAddDaemonsAndWorkerTierFlags) {
  ClusterConfig c;
  c.router.http_port = 8000;
  c.router.grpc_port = 9000;
  c.prefill.count = 1;
  c.decode.count = 1;
  c.kv_tiers.host_mb = 64;
  c.kv_tiers.disk_path = "/data/kv";
  c.kv_tiers.disk_mb = 1024;
  c.kv_tiers.kvstore_count = 1;
  c.kv_tiers.kvstore_mb = 512;
  auto planned =
      PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}, {8103, 9103}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const ClusterPlan& plan = *planned;
  ASSERT_EQ(plan.kvstores.size(), 1u);
  EXPECT_THAT(plan.kvstores[0].argv,
              ElementsAre("/bin/strata", "kvstore", "--id", "kvstore-0", "--host", "127.0.0.1",
                          "--http-port", "8103", "--port", "9103", "--capacity-bytes",
                          "536870912", "--policy", "lru", "--router", "127.0.0.1:9000"));
  EXPECT_EQ(plan.kvstores[0].ready_url, "http://127.0.0.1:8103/health");
  ASSERT_EQ(plan.workers.size(), 2u);
  const auto& argv = plan.workers[0].argv;
  const std::vector<std::string> tail(argv.end() - 17, argv.end());
  EXPECT_THAT(tail, ElementsAre("--kv-host-mb", "64", "--kv-host-policy", "lru", "--kv-offload",
                                "write-back", "--kv-staging-mb", "64", "--kv-disk-path",
                                "/data/kv/prefill-0",
                                "--kv-disk-mb", "1024", "--kv-disk-policy", "lru",
                                "--kv-disk-admit-uses", "2", "--kv-remote-from-router"));
}

// The value after `flag` in a worker's argv; "(absent)" without the flag.
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "(absent)";
}

TEST(ClusterPlanTest, ApiCompatFlagsReachTheRouterAndEveryWorkerWhenSet) {
  ClusterConfig c;
  auto defaults = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(FlagValue(defaults->router[0].argv, "--unknown-params"), "(absent)");
  EXPECT_EQ(FlagValue(defaults->workers[0].argv, "--get-load-format"), "(absent)");
  EXPECT_EQ(FlagValue(defaults->router[0].argv, "--tool-call-parser"), "(absent)");
  EXPECT_EQ(FlagValue(defaults->router[0].argv, "--max-memory-mb"), "(absent)");
  EXPECT_EQ(FlagValue(defaults->router[0].argv, "--max-inflight-per-worker"), "(absent)");
  c.unknown_params = "reject";
  c.max_memory_mb = 2048;
  c.router.max_inflight_per_worker = 5000;
  c.get_load_format = "vllm-router";
  c.tool_call_parser = "hermes";
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  for (const auto* p : {&planned->router[0], &planned->workers[0], &planned->workers[1]}) {
    EXPECT_EQ(FlagValue(p->argv, "--unknown-params"), "reject") << p->name;
    EXPECT_EQ(FlagValue(p->argv, "--get-load-format"), "vllm-router") << p->name;
    EXPECT_EQ(FlagValue(p->argv, "--tool-call-parser"), "hermes") << p->name;
    EXPECT_EQ(FlagValue(p->argv, "--max-memory-mb"), "2048") << p->name;
  }
  EXPECT_EQ(FlagValue(planned->router[0].argv, "--max-inflight-per-worker"), "5000");
}

std::vector<ProcessSpec> PlanWorkers(const ClusterConfig& c) {
  std::vector<std::pair<int, int>> ports;
  for (int i = 0; i < c.prefill.count + c.decode.count + c.mixed.count; ++i) {
    ports.emplace_back(8100 + i, 9100 + i);
  }
  auto plan = PlanCluster(c, "/bin/strata", "/models/m", "/logs", ports);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? plan->workers : std::vector<ProcessSpec>();
}

ClusterConfig CudaConfig() {
  ClusterConfig c;
  c.router.grpc_port = 9000;
  c.engine.plugin = "cuda";
  return c;
}

TEST(ClusterPlanTest, CpuWorkersGetNoDeviceOrPoolFlags) {
  ClusterConfig c;
  c.router.grpc_port = 9000;
  for (const auto& w : PlanWorkers(c)) {
    EXPECT_EQ(FlagValue(w.argv, "--plugin-config"), "(absent)") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--gpu-memory-share"), "(absent)") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--kv-cache-mb"), "(absent)") << w.name;
  }
}

TEST(ClusterPlanTest, PrefillAndDecodeOnOneGpuGetItsDeviceAndHalfOfNinetyPercent) {
  ClusterConfig c = CudaConfig();
  c.engine.plugin_config = R"({"streams": 2})";
  c.prefill.gpus = {0};
  c.decode.gpus = {0};
  const auto workers = PlanWorkers(c);
  ASSERT_EQ(workers.size(), 2u);
  for (const auto& w : workers) {
    EXPECT_EQ(FlagValue(w.argv, "--plugin"), "cuda") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--plugin-config"), R"({"device":0,"streams":2})") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--gpu-memory-share"), "0.45") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--kv-cache-mb"), "(absent)") << w.name;
  }
}

TEST(ClusterPlanTest, GpuPluginWithoutGpuIdsSharesTheDefaultDevice) {
  ClusterConfig c = CudaConfig();
  c.decode.count = 2;
  const auto workers = PlanWorkers(c);
  ASSERT_EQ(workers.size(), 3u);
  for (const auto& w : workers) {
    EXPECT_EQ(FlagValue(w.argv, "--plugin-config"), "(absent)") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--gpu-memory-share"), "0.3") << w.name;
  }
}

TEST(ClusterPlanTest, WorkersGoRoundRobinOverTheirPoolsGpus) {
  ClusterConfig c = CudaConfig();
  c.prefill.gpus = {0};
  c.decode.count = 3;
  c.decode.gpus = {0, 1};
  const auto workers = PlanWorkers(c);
  ASSERT_EQ(workers.size(), 4u);
  // GPU 0: prefill-0, decode-0, decode-2; GPU 1: decode-1.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {R"({"device":0})", "0.3"},
      {R"({"device":0})", "0.3"},
      {R"({"device":1})", "0.9"},
      {R"({"device":0})", "0.3"}};
  for (size_t i = 0; i < workers.size(); ++i) {
    EXPECT_EQ(FlagValue(workers[i].argv, "--plugin-config"), expected[i].first) << workers[i].name;
    EXPECT_EQ(FlagValue(workers[i].argv, "--gpu-memory-share"), expected[i].second)
        << workers[i].name;
  }
}

TEST(ClusterPlanTest, ExplicitShareAndKvCacheMbWin) {
  ClusterConfig c = CudaConfig();
  c.prefill.gpus = {0};
  c.prefill.gpu_memory_share = 0.3;
  c.decode.gpus = {0};
  c.decode.kv_cache_mb = 20000;
  c.mixed.count = 1;
  c.mixed.gpus = {0};
  const auto workers = PlanWorkers(c);
  ASSERT_EQ(workers.size(), 3u);
  EXPECT_EQ(FlagValue(workers[0].argv, "--gpu-memory-share"), "0.3");
  EXPECT_EQ(FlagValue(workers[0].argv, "--kv-cache-mb"), "(absent)");
  EXPECT_EQ(FlagValue(workers[1].argv, "--kv-cache-mb"), "20000");
  EXPECT_EQ(FlagValue(workers[1].argv, "--gpu-memory-share"), "(absent)");
  // The mixed worker splits what the explicit 0.3 leaves of 0.9 with the kv_cache_mb one.
  EXPECT_EQ(FlagValue(workers[2].argv, "--gpu-memory-share"), "0.3");
}

TEST(ClusterPlanTest, NumKvBlocksSizesEveryWorkerWithoutShares) {
  ClusterConfig c = CudaConfig();
  c.engine.num_kv_blocks = 512;
  c.prefill.gpus = {0};
  c.decode.gpus = {0};
  for (const auto& w : PlanWorkers(c)) {
    EXPECT_EQ(FlagValue(w.argv, "--num-kv-blocks"), "512") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--gpu-memory-share"), "(absent)") << w.name;
    EXPECT_EQ(FlagValue(w.argv, "--plugin-config"), R"({"device":0})") << w.name;
  }
}

TEST(ClusterPlanTest, OversubscribedGpuIsAnError) {
  ClusterConfig c = CudaConfig();
  c.prefill.gpus = {0};
  c.prefill.gpu_memory_share = 0.6;
  c.decode.gpus = {0};
  c.decode.gpu_memory_share = 0.6;
  auto plan = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "prefill.gpu_memory_share: the gpu_memory_share of the workers on GPU 0 adds up to "
            "1.2, more than 1");
}


TEST(ClusterPlanTest, KvDevicePathReachesEveryWorkerOnlyWhenNotAuto) {
  ClusterConfig c;
  c.prefill.count = 1;
  c.decode.count = 1;
  auto planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  for (const auto& w : planned->workers) EXPECT_EQ(FlagValue(w.argv, "--kv-device-path"), "(absent)");
  c.engine.kv_device_path = "staged";
  planned = PlanCluster(c, "/bin/strata", "/models/m", "/logs", {{8101, 9101}, {8102, 9102}});
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_EQ(planned->workers.size(), 2u);
  for (const auto& w : planned->workers) EXPECT_EQ(FlagValue(w.argv, "--kv-device-path"), "staged");
}

}  // namespace
}  // namespace strata::cli
