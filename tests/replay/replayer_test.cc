// strata::replay::Replayer against an in-test HTTP server on 127.0.0.1 that plays scripted
// responses (SSE with delays, HTTP errors, broken streams, stalls). The scenario of a request is
// chosen by its max_tokens, so concurrent connections need no ordering.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "strata/replay/prompt_synthesizer.h"
#include "strata/replay/replayer.h"

namespace strata::replay {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string Chunk(const std::string& data) {  // One HTTP/1.1 chunk.
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

std::string Event(const std::string& json) { return Chunk("data: " + json + "\n\n"); }

constexpr char kSseHead[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

// Accepts connections; for each, reads one request and runs script(fd, headers, body).
class FakeServer {
 public:
  using Script = std::function<void(int fd, const std::string& head, const std::string& body)>;

  explicit FakeServer(Script script) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(::listen(listen_fd_, 256), 0);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    for (auto& t : handlers_) t.join();
  }
  int port() const { return port_; }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::string> heads() {
    std::lock_guard<std::mutex> lock(mu_);
    return heads_;
  }

 private:
  void AcceptLoop() {
    while (true) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      handlers_.emplace_back([this, fd] { Handle(fd); });
    }
  }
  void Handle(int fd) {
    std::string data;
    char buf[65536];
    size_t header_end;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return (void)::close(fd);
      data.append(buf, static_cast<size_t>(n));
    }
    std::string head = data.substr(0, header_end);
    size_t cl = head.find("Content-Length: ");
    size_t length = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 16));
    while (data.size() < header_end + 4 + length) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return (void)::close(fd);
      data.append(buf, static_cast<size_t>(n));
    }
    std::string body = data.substr(header_end + 4, length);
    {
      std::lock_guard<std::mutex> lock(mu_);
      heads_.push_back(head);
      bodies_.push_back(body);
    }
    script_(fd, head, body);
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
  }

  Script script_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> handlers_;  // Touched only by the acceptor thread, then the dtor.
  std::mutex mu_;
  std::vector<std::string> bodies_, heads_;
};

int MaxTokens(const std::string& body) {
  return nlohmann::json::parse(body)["max_tokens"].get<int>();
}

PromptSynthesizer Prompts() { return *PromptSynthesizer::Create(1024, {}, 7); }

std::unique_ptr<Replayer> MakeReplayer(int port, double timeout_s = 10, std::string key = "",
                                       PromptSource source = PromptSource::kAuto,
                                       int attempts = 1) {
  ReplayOptions o;
  o.attempts = attempts;
  o.prompt_source = source;
  o.url = *ParseServerUrl("http://127.0.0.1:" + std::to_string(port) + "/v1");
  o.model = "m";
  o.api_key = std::move(key);
  o.timeout_s = timeout_s;
  return *Replayer::Create(o);
}

TraceRequest Req(double at, int max_tokens, int input = 20) {
  TraceRequest r;
  r.arrival_s = at;
  r.input_tokens = input;
  r.output_tokens = max_tokens;
  return r;
}

// Scenario 3: 300 ms to the first chunk, then gaps of 200 ms and 100 ms, then usage and [DONE].
void StreamWithDelays(int fd) {
  std::this_thread::sleep_for(milliseconds(300));
  WriteAll(fd, kSseHead);
  WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"a"}],"usage":null})"));
  std::this_thread::sleep_for(milliseconds(200));
  WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"b"}],"usage":null})"));
  std::this_thread::sleep_for(milliseconds(100));
  WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"c","finish_reason":"length"}]})"));
  WriteAll(fd, Event(R"({"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":3,)"
                     R"("total_tokens":23,"prompt_tokens_details":{"cached_tokens":16}}})"));
  WriteAll(fd, Chunk("data: [DONE]\n\n") + "0\r\n\r\n");
}

TEST(ParseServerUrlTest, DefaultsAndErrors) {
  absl::StatusOr<ServerUrl> u = ParseServerUrl("http://localhost:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, "8000");
  EXPECT_EQ(u->base_path, "/v1");
  EXPECT_EQ(ParseServerUrl("http://h:1/api/v1/")->base_path, "/api/v1");
  EXPECT_FALSE(u->tls);
  absl::StatusOr<ServerUrl> s = ParseServerUrl("https://api.example.com/v1");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->tls);
  EXPECT_EQ(s->port, "443");
  EXPECT_EQ(s->base_path, "/v1");
  EXPECT_FALSE(ParseServerUrl("ftp://h:1").ok());
  EXPECT_FALSE(ParseServerUrl("http://:80").ok());
  EXPECT_FALSE(ParseServerUrl("http://h:99999").ok());
}

TEST(ReplayerTest, MeasuresTtftGapsAndUsageAndSendsTheOpenAiBody) {
  FakeServer server([](int fd, const std::string&, const std::string&) { StreamWithDelays(fd); });
  auto replayer = MakeReplayer(server.port(), 10, "sk-test");
  PromptSynthesizer prompts = Prompts();
  auto results = replayer->Run({Req(0, 3)}, prompts);
  ASSERT_TRUE(results.ok()) << results.status();
  const RequestResult& r = (*results)[0];
  ASSERT_TRUE(r.ok()) << r.error_type << " " << r.error_message;
  EXPECT_EQ(r.http_status, 200);
  EXPECT_GE(r.ttft_s, 0.3);
  EXPECT_LT(r.ttft_s, 2.0);
  ASSERT_EQ(r.gaps_s.size(), 2u);
  // Each chunk leaves the server after the sleeps before it, so cumulative times are strict
  // lower bounds; a single gap can be shorter by however late the previous chunk was read.
  EXPECT_GE(r.ttft_s + r.gaps_s[0], 0.5);
  EXPECT_GE(r.ttft_s + r.gaps_s[0] + r.gaps_s[1], 0.6);
  EXPECT_GT(r.gaps_s[0], 0.1);
  EXPECT_GT(r.gaps_s[1], 0.02);
  EXPECT_GE(r.e2e_s, r.ttft_s + r.gaps_s[0] + r.gaps_s[1] - 1e-9);
  EXPECT_EQ(r.token_chunks, 3);
  EXPECT_EQ(r.prompt_tokens, 20);
  EXPECT_EQ(r.cached_tokens, 16);
  EXPECT_EQ(r.completion_tokens, 3);

  nlohmann::json body = nlohmann::json::parse(server.bodies().at(0));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["max_tokens"], 3);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["prompt"].get<std::vector<int32_t>>(), *prompts.Synthesize(Req(0, 3), 0));
  EXPECT_THAT(server.heads().at(0), HasSubstr("POST /v1/completions HTTP/1.1"));
  EXPECT_THAT(server.heads().at(0), HasSubstr("Authorization: Bearer sk-test"));
}

// A request that carries prompt text (a recording made with text) sends that text under
// kAuto and kText; kTokens and requests without text send synthesized ids.
TEST(ReplayerTest, PromptSourceChoosesTextOrTokenIds) {
  FakeServer server([](int fd, const std::string&, const std::string&) { StreamWithDelays(fd); });
  TraceRequest with_text = Req(0, 3);
  with_text.prompt = "Hello there, \"quoted\" text";
  const TraceRequest without_text = Req(0, 3);
  PromptSynthesizer prompts = Prompts();
  for (PromptSource source : {PromptSource::kAuto, PromptSource::kTokens}) {
    auto replayer = MakeReplayer(server.port(), 10, "", source);
    auto results = replayer->Run({with_text, without_text}, prompts);
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_TRUE((*results)[0].ok() && (*results)[1].ok());
  }
  std::vector<nlohmann::json> bodies;
  for (const std::string& b : server.bodies()) bodies.push_back(nlohmann::json::parse(b));
  ASSERT_EQ(bodies.size(), 4u);
  // Unique prompts depend on the request's position: index 0 (with_text under kTokens) and
  // index 1 (without_text, under both sources).
  const std::vector<int32_t> ids0 = *prompts.Synthesize(with_text, 0);
  const std::vector<int32_t> ids1 = *prompts.Synthesize(without_text, 1);
  int text = 0, as_ids0 = 0, as_ids1 = 0;
  for (const nlohmann::json& b : bodies) {
    if (b["prompt"].is_string()) {
      EXPECT_EQ(b["prompt"], with_text.prompt);
      ++text;
      continue;
    }
    const auto ids = b["prompt"].get<std::vector<int32_t>>();
    as_ids0 += ids == ids0 ? 1 : 0;
    as_ids1 += ids == ids1 ? 1 : 0;
  }
  EXPECT_EQ(text, 1);     // kAuto's first request.
  EXPECT_EQ(as_ids0, 1);  // kTokens' first request.
  EXPECT_EQ(as_ids1, 2);  // The request without text, under both.

  auto text_only = MakeReplayer(server.port(), 10, "", PromptSource::kText);
  auto refused = text_only->Run({with_text, without_text}, prompts);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("request 1"));
  EXPECT_EQ(server.bodies().size(), 4u) << "nothing is sent when the check fails";
  EXPECT_EQ(*ParsePromptSource("text"), PromptSource::kText);
  EXPECT_FALSE(ParsePromptSource("words").ok());
}

// Scenarios by max_tokens: 1 = 429 with an OpenAI error, 2 = 500 with a non-JSON body,
// 4 = an error event mid-stream, 5 = a stream cut before [DONE], 6 = a stall past the timeout.
void ErrorScript(int fd, const std::string&, const std::string& body) {
  switch (MaxTokens(body)) {
    case 1: {
      std::string json = R"({"error":{"message":"overloaded","type":"rate_limit_error",)"
                         R"("param":null,"code":"rate_limit_exceeded"}})";
      WriteAll(fd, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                   "Content-Length: " + std::to_string(json.size()) + "\r\n\r\n" + json);
      break;
    }
    case 2:
      WriteAll(fd, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops");
      break;
    case 4:
      WriteAll(fd, kSseHead);
      WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"a"}]})"));
      WriteAll(fd, Event(R"({"error":{"message":"worker died","type":"server_error"}})"));
      WriteAll(fd, Chunk("data: [DONE]\n\n") + "0\r\n\r\n");
      break;
    case 5:
      WriteAll(fd, kSseHead);
      WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"a"}]})"));
      break;  // The connection closes without the last chunk.
    case 6:
      std::this_thread::sleep_for(milliseconds(1500));
      break;
  }
}

TEST(ReplayerTest, ClassifiesErrors) {
  FakeServer server(ErrorScript);
  auto replayer = MakeReplayer(server.port(), /*timeout_s=*/0.5);
  auto results = replayer->Run({Req(0, 1), Req(0, 2), Req(0, 4), Req(0, 5), Req(0, 6)}, Prompts());
  ASSERT_TRUE(results.ok()) << results.status();
  const auto& r = *results;
  EXPECT_EQ(r[0].error, ErrorKind::kHttp4xx);
  EXPECT_EQ(r[0].http_status, 429);
  EXPECT_EQ(r[0].error_type, "rate_limit_error");
  EXPECT_EQ(r[0].error_message, "overloaded");
  EXPECT_EQ(r[1].error, ErrorKind::kHttp5xx);
  EXPECT_EQ(r[1].error_type, "http_500");
  EXPECT_EQ(r[2].error, ErrorKind::kStream);
  EXPECT_EQ(r[2].error_type, "server_error");
  EXPECT_EQ(r[2].token_chunks, 1);
  EXPECT_EQ(r[3].error, ErrorKind::kStream);
  EXPECT_EQ(r[4].error, ErrorKind::kTimeout);
  EXPECT_GE(r[4].e2e_s, 0.5);
}

TEST(ReplayerTest, ConnectionRefusedIsAConnectError) {
  int port;
  {
    FakeServer server([](int, const std::string&, const std::string&) {});
    port = server.port();
  }  // Closed: nothing listens on `port` now.
  auto results = MakeReplayer(port)->Run({Req(0, 1)}, Prompts());
  ASSERT_TRUE(results.ok());
  EXPECT_EQ((*results)[0].error, ErrorKind::kConnect);
  EXPECT_EQ(ErrorKindName((*results)[0].error), std::string("connect"));
}

// A connection cut mid-stream (the router died) is retried with the request's Idempotency-Key
// and the last complete event's id, and the measurements run on across the attempts; a refused
// connection is retried too, and a request whose every attempt fails is a connect error.
TEST(ReplayerTest, RetriesACutStreamWithItsKeyAndLastEventId) {
  std::atomic<int> connections{0};
  FakeServer server([&](int fd, const std::string& head, const std::string&) {
    if (connections.fetch_add(1) == 0) {
      WriteAll(fd, kSseHead);
      WriteAll(fd, Chunk("id: 1\ndata: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"));
      WriteAll(fd, Chunk("id: 2\ndata: {\"choices\":[{\"index\":0,\"text\":\"b\"}]}\n\n"));
      WriteAll(fd, Chunk("id: 3\ndata: {\"choi"));  // cut inside an event
      ::shutdown(fd, SHUT_RDWR);
      return;
    }
    WriteAll(fd, kSseHead);
    WriteAll(fd, Chunk("id: 3\ndata: {\"choices\":[{\"index\":0,\"text\":\"c\"}]}\n\n"));
    WriteAll(fd, Chunk("data: [DONE]\n\n") + "0\r\n\r\n");
  });
  auto replayer = MakeReplayer(server.port(), 10, "", PromptSource::kAuto, /*attempts=*/3);
  auto results = replayer->Run({Req(0, 3)}, Prompts());
  ASSERT_TRUE(results.ok()) << results.status();
  const RequestResult& r = (*results)[0];
  ASSERT_TRUE(r.ok()) << r.error_type << " " << r.error_message;
  EXPECT_EQ(r.retries, 1);
  EXPECT_EQ(r.resumes, 1);
  EXPECT_EQ(r.token_chunks, 3);
  const std::vector<std::string> heads = server.heads();
  ASSERT_EQ(heads.size(), 2u);
  auto key_of = [](const std::string& head) {
    const size_t at = head.find("Idempotency-Key: ");
    return at == std::string::npos ? std::string() : head.substr(at, head.find('\r', at) - at);
  };
  EXPECT_THAT(key_of(heads[0]), HasSubstr("Idempotency-Key: strata-replay-"));
  EXPECT_EQ(key_of(heads[0]), key_of(heads[1]));
  EXPECT_EQ(heads[0].find("Last-Event-ID"), std::string::npos);
  EXPECT_THAT(heads[1] + "\r\n", HasSubstr("\r\nLast-Event-ID: 2\r\n"));

  int port;
  {
    FakeServer gone([](int, const std::string&, const std::string&) {});
    port = gone.port();
  }
  auto refused = MakeReplayer(port, 10, "", PromptSource::kAuto, 3)->Run({Req(0, 1)}, Prompts());
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ((*refused)[0].error, ErrorKind::kConnect);
  EXPECT_EQ((*refused)[0].retries, 2);
  EXPECT_EQ((*refused)[0].resumes, 0);
}

// Open loop: the server answers nothing until it holds all 8 requests at once, so a client that
// waited for an answer before sending more (closed loop) could never finish; the sends must
// also leave on schedule while earlier requests are stalled.
TEST(ReplayerTest, OpenLoopSendsOnScheduleWhileTheServerStalls) {
  constexpr int kRequests = 8;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  FakeServer server([&](int fd, const std::string&, const std::string&) {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    const bool all =
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived == kRequests; });
    lock.unlock();
    if (!all) return;  // Closed loop: the client gets a broken stream.
    WriteAll(fd, kSseHead);
    WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"a"}]})"));
    WriteAll(fd, Chunk("data: [DONE]\n\n") + "0\r\n\r\n");
  });
  std::vector<TraceRequest> reqs;
  for (int i = 0; i < kRequests; ++i) reqs.push_back(Req(0.05 * i, 1));
  auto results = MakeReplayer(server.port())->Run(reqs, Prompts());
  ASSERT_TRUE(results.ok());
  for (const RequestResult& r : *results) {
    EXPECT_TRUE(r.ok()) << r.index << ": " << r.error_message;
    EXPECT_GE(r.send_s, r.scheduled_s);
    EXPECT_LT(r.send_s - r.scheduled_s, 0.5) << "request " << r.index << " left late";
  }
  // The last request was sent ~0.35 s in; every earlier one was still waiting then.
  EXPECT_GE((*results)[0].ttft_s, 0.3);
}

TEST(ReplayerTest, ProgressReportsEveryResultOnce) {
  FakeServer server([](int fd, const std::string&, const std::string&) {
    WriteAll(fd, kSseHead);
    WriteAll(fd, Event(R"({"choices":[{"index":0,"text":"a"}]})"));
    WriteAll(fd, Chunk("data: [DONE]\n\n") + "0\r\n\r\n");
  });
  std::vector<TraceRequest> reqs;
  for (int i = 0; i < 20; ++i) reqs.push_back(Req(0.01 * i, 1));
  std::map<int64_t, int> seen;
  int64_t last_done = 0;
  auto results = MakeReplayer(server.port())->Run(
      reqs, Prompts(),
      [&](const ReplayProgress& p, const std::vector<const RequestResult*>& finished) {
        for (const RequestResult* r : finished) ++seen[r->index];
        last_done = p.done.load();
      },
      0.05);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ(seen.size(), 20u);
  for (const auto& [i, n] : seen) EXPECT_EQ(n, 1) << i;
  EXPECT_EQ(last_done, 20);
}

TEST(FetchModelInfoTest, ReadsIdAndContextAndFailsClearly) {
  FakeServer server([](int fd, const std::string& head, const std::string&) {
    EXPECT_THAT(head, HasSubstr("GET /v1/models"));
    std::string json = R"({"object":"list","data":[{"id":"tiny","max_model_len":4096}]})";
    WriteAll(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(json.size()) +
                     "\r\n\r\n" + json);
  });
  auto info = FetchModelInfo(*ParseServerUrl("http://127.0.0.1:" +
                                             std::to_string(server.port())), "");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->id, "tiny");
  EXPECT_EQ(info->max_model_len, 4096);
  EXPECT_EQ(info->vocab_size, 0);
  auto down = FetchModelInfo(*ParseServerUrl("http://127.0.0.1:1"), "", 2.0);
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata::replay
