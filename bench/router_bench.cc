// The router's own overhead: requests/s and latency of streaming completions through a real
// in-process Router against a fake worker that answers at once, side by side with the same load
// sent straight to that worker over gRPC (the worker without the router), at several numbers
// of concurrent streams. A plain main that prints a markdown table; scripts/bench_router.sh runs
// it.
//
//   router_bench [--concurrency=1,64,1000] [--seconds=5] [--warmup=1] [--tokens=16]
//                [--prompt-tokens=32] [--router-threads=2] [--client-threads=1]
//                [--max-inflight=1000000] [--absl-deadlock-check=0]
//
// Each level runs C closed-loop clients: every client sends its next request as soon as the
// previous one completed. Router clients each hold one keep-alive HTTP/1.1 connection and are
// Boost.Asio async sockets on --client-threads threads; direct clients are gRPC callback-API
// streams on one channel, as the router itself uses. A request counts if it completed inside
// the measuring window [warmup, warmup + seconds); errors count over the whole level.
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "strata/engine/presets.h"
#include "strata/proto/protocol.h"
#include "strata/router/router.h"

namespace strata::bench {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::vector<int> concurrency = {1, 64, 1000};
  double seconds = 5;
  double warmup = 1;
  int tokens = 16;
  int prompt_tokens = 32;
  int router_threads = 2;
  int client_threads = 1;
  // The router's default cap (256 outstanding per worker) would answer 429 to most of 1,000
  // streams on one worker; the bench measures forwarding, so the cap is lifted by default.
  int max_inflight = 1000000;


  int absl_deadlock_check = 0;  // as the strata binary (cli/src/main.cc)
};

bool ParseFlag(absl::string_view arg, Flags& f) {
  const size_t eq = arg.find('=');
  if (arg.substr(0, 2) != "--" || eq == absl::string_view::npos) return false;
  const absl::string_view name = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
  if (name == "concurrency") {
    f.concurrency.clear();
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int c = 0;
      if (!absl::SimpleAtoi(part, &c) || c <= 0) return false;
      f.concurrency.push_back(c);
    }
    return !f.concurrency.empty();
  }
  if (name == "absl-deadlock-check") {
    return absl::SimpleAtoi(value, &f.absl_deadlock_check);
  }
  if (name == "seconds") return absl::SimpleAtod(value, &f.seconds) && f.seconds > 0;
  if (name == "warmup") return absl::SimpleAtod(value, &f.warmup) && f.warmup >= 0;
  int* target = name == "tokens"           ? &f.tokens
                : name == "prompt-tokens"  ? &f.prompt_tokens
                : name == "router-threads" ? &f.router_threads
                : name == "client-threads" ? &f.client_threads
                : name == "max-inflight"   ? &f.max_inflight
                                           : nullptr;
  return target != nullptr && absl::SimpleAtoi(value, target) && *target > 0;
}

// 1,000 client sockets plus the router's side of each exceed the usual soft limit of 1,024.
void RaiseFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) std::perror("setrlimit(RLIMIT_NOFILE)");
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// User + system CPU seconds of this whole process (router, fake worker and clients alike).
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// CPU seconds `threads` have used so far (0 for any whose clock cannot be read).
double ThreadsCpuSeconds(std::vector<std::thread>& threads) {
  double total = 0;
  for (std::thread& t : threads) {
    clockid_t clock;
    timespec ts{};
    if (pthread_getcpuclockid(t.native_handle(), &clock) != 0) continue;
    if (clock_gettime(clock, &ts) != 0) continue;
    total += static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Measurement

struct Sample {
  double ttft_s;
  double e2e_s;
};

// One level's shared state: the window, the stop flag, and how many clients are still running.
struct Run {
  Clock::time_point window_begin, window_end;
  double window_cpu_s = 0;               // process CPU seconds spent inside the window
  double window_client_cpu_s = 0;        // of which the load generator's own threads, where known
  std::function<double()> client_cpu_s;  // CPU seconds of the load generator's threads so far
  std::atomic<bool> stop{false};
  std::atomic<int> active{0};
  std::mutex mu;
  std::condition_variable idle;

  void ClientExited() {
    std::lock_guard<std::mutex> lock(mu);
    if (--active == 0) idle.notify_all();
  }
  // True when every client exited within `timeout`.
  bool WaitIdle(Clock::duration timeout) {
    std::unique_lock<std::mutex> lock(mu);
    return idle.wait_for(lock, timeout, [this] { return active.load() == 0; });
  }
};

// Per client: only that client's completions touch it, one at a time.
struct ClientStats {
  std::vector<Sample> samples;
  int64_t errors = 0;
  std::string first_error;

  void Record(const Run& run, Clock::time_point start, Clock::time_point first,
              Clock::time_point end) {
    if (end < run.window_begin || end >= run.window_end) return;
    samples.push_back({Seconds(first - start), Seconds(end - start)});
  }
  void Error(std::string what) {
    if (errors++ == 0) first_error = std::move(what);
  }
};

struct LevelResult {
  double rps = 0;
  double e2e_p50 = 0, e2e_p99 = 0, ttft_p50 = 0, ttft_p99 = 0;
  double cpu_us_per_req = 0;         // whole-process CPU inside the window / completed requests
  double client_cpu_us_per_req = 0;  // the part spent by the HTTP load generator's threads
  int64_t completed = 0, errors = 0, stuck = 0;
  std::string first_error;
};

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

LevelResult Summarize(const Run& run, const std::vector<const ClientStats*>& clients,
                      double seconds) {
  LevelResult r;
  std::vector<double> e2e, ttft;
  for (const ClientStats* c : clients) {
    for (const Sample& s : c->samples) {
      e2e.push_back(s.e2e_s);
      ttft.push_back(s.ttft_s);
    }
    r.errors += c->errors;
    if (r.first_error.empty()) r.first_error = c->first_error;
  }
  r.completed = static_cast<int64_t>(e2e.size());
  r.rps = static_cast<double>(e2e.size()) / seconds;
  r.e2e_p50 = Percentile(e2e, 0.5);
  r.e2e_p99 = Percentile(e2e, 0.99);
  r.ttft_p50 = Percentile(ttft, 0.5);
  r.ttft_p99 = Percentile(ttft, 0.99);
  if (r.completed > 0) {
    const double n = static_cast<double>(r.completed);
    r.cpu_us_per_req = run.window_cpu_s * 1e6 / n;
    r.client_cpu_us_per_req = run.window_client_cpu_s * 1e6 / n;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The fake worker: Generate streams `tokens` one-token messages at once, then finishes.

class InstantStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  InstantStream(int tokens, int prompt_tokens) : total_(tokens), prompt_tokens_(prompt_tokens) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client gone"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    msg_.Clear();
    msg_.add_tokens(100 + sent_ % 100);
    msg_.set_text("a");
    if (++sent_ < total_) {
      StartWrite(&msg_);
      return;
    }
    msg_.set_finished(true);
    msg_.set_finish_reason("length");
    msg_.set_prompt_tokens(prompt_tokens_);
    msg_.set_completion_tokens(total_);
    StartWriteAndFinish(&msg_, grpc::WriteOptions(), grpc::Status::OK);
  }

  const int total_, prompt_tokens_;
  int sent_ = 0;
  v1::GenerateResponse msg_;
};

class FakeWorkerService final : public v1::Worker::CallbackService {
 public:
  explicit FakeWorkerService(int tokens) : tokens_(tokens) {}
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext*, const v1::GenerateRequest* request) override {
    return new InstantStream(tokens_, request->prompt_size());
  }

 private:
  const int tokens_;
};

// Registers the fake worker with the router and heartbeats until destroyed, as
// worker/src/registry_client.cc does for a real worker.
class Registration {
 public:
  Registration(const std::string& router_address, v1::WorkerInfo info)
      : info_(std::move(info)), stub_(v1::Registry::NewStub(proto::MakeChannel(router_address))) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Registration() {
    stop_.Notify();
    thread_.join();
  }

 private:
  void Loop() {
    uint64_t epoch = 0;
    bool registered = false;
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(registered ? 500 : 50))) {
      registered = registered ? Beat(epoch) : Register(&epoch);
    }
  }
  bool Register(uint64_t* epoch) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::RegisterRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    *req.mutable_worker() = info_;
    v1::RegisterResponse resp;
    if (!stub_->Register(&ctx, req, &resp).ok()) return false;
    *epoch = resp.epoch();
    return true;
  }
  bool Beat(uint64_t epoch) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::HeartbeatRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_worker_id(info_.id());
    req.set_epoch(epoch);
    req.mutable_load()->set_free_kv_blocks(info_.num_kv_blocks());
    req.mutable_load()->set_total_kv_blocks(info_.num_kv_blocks());
    v1::HeartbeatResponse resp;
    grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "heartbeat failed: %s\n", s.error_message().c_str());
      return true;  // a busy router; keep beating
    }
    return !resp.reregister();
  }

  const v1::WorkerInfo info_;
  std::unique_ptr<v1::Registry::Stub> stub_;
  absl::Notification stop_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Router clients: HTTP/1.1 keep-alive, POST /v1/completions with "stream": true.

// Incremental parser of one streamed response: status line and headers, then chunked SSE
// until the terminating zero-size chunk. Non-chunked responses (errors) use Content-Length.
class SseResponseParser {
 public:
  enum class State { kMore, kDone, kBad };

  void Reset() {
    buf_.clear();
    phase_ = Phase::kHeaders;
    status_ = 0;
    events_ = 0;
    saw_done_ = saw_error_ = false;
  }
  // Consumes `data`; `*first_event` is set to true the first time an SSE data chunk arrives.
  State Feed(std::string_view data, bool* first_event);

  int status() const { return status_; }
  int events() const { return events_; }
  bool saw_done() const { return saw_done_; }
  bool saw_error() const { return saw_error_; }
  const std::string& error_body() const { return error_body_; }

 private:
  enum class Phase { kHeaders, kChunkSize, kChunkData, kTrailer, kBody };
  State ParseHeaders(size_t end);
  void OnChunk(std::string_view chunk, bool* first_event);

  std::string buf_;
  Phase phase_ = Phase::kHeaders;
  size_t left_ = 0;  // bytes of the current chunk or body still to come
  int status_ = 0, events_ = 0;
  bool saw_done_ = false, saw_error_ = false;
  std::string error_body_;
};

SseResponseParser::State SseResponseParser::ParseHeaders(size_t end) {
  std::string head = buf_.substr(0, end);
  buf_.erase(0, end + 4);
  if (head.size() < 12 || !absl::SimpleAtoi(head.substr(9, 3), &status_)) return State::kBad;
  std::transform(head.begin(), head.end(), head.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    phase_ = Phase::kChunkSize;
    return State::kMore;
  }
  const size_t cl = head.find("content-length: ");
  if (cl == std::string::npos) return State::kBad;
  left_ = std::strtoul(head.c_str() + cl + 16, nullptr, 10);
  phase_ = Phase::kBody;
  return State::kMore;
}

void SseResponseParser::OnChunk(std::string_view chunk, bool* first_event) {
  for (size_t at = chunk.find("data: "); at != std::string_view::npos;
       at = chunk.find("data: ", at + 6)) {
    const std::string_view rest = chunk.substr(at + 6);
    if (rest.substr(0, 6) == "[DONE]") {
      saw_done_ = true;
    } else {
      if (events_++ == 0) *first_event = true;
      if (rest.substr(0, 9) == "{\"error\":") {
        saw_error_ = true;
        error_body_ = std::string(rest.substr(0, 200));
      }
    }
  }
}

SseResponseParser::State SseResponseParser::Feed(std::string_view data, bool* first_event) {
  buf_.append(data);
  for (;;) {
    if (phase_ == Phase::kHeaders) {
      const size_t end = buf_.find("\r\n\r\n");
      if (end == std::string::npos) return State::kMore;
      if (ParseHeaders(end) == State::kBad) return State::kBad;
    } else if (phase_ == Phase::kBody) {
      if (buf_.size() < left_) return State::kMore;
      error_body_ = buf_.substr(0, std::min<size_t>(left_, 200));
      buf_.erase(0, left_);
      return State::kDone;
    } else if (phase_ == Phase::kChunkSize || phase_ == Phase::kTrailer) {
      const size_t eol = buf_.find("\r\n");
      if (eol == std::string::npos) return State::kMore;
      const std::string line = buf_.substr(0, eol);
      buf_.erase(0, eol + 2);
      if (phase_ == Phase::kTrailer) {
        if (line.empty()) return buf_.empty() ? State::kDone : State::kBad;
        continue;  // a trailer field: ignored
      }
      left_ = std::strtoul(line.c_str(), nullptr, 16);
      phase_ = left_ == 0 ? Phase::kTrailer : Phase::kChunkData;
    } else {  // kChunkData: the whole chunk and its CRLF
      if (buf_.size() < left_ + 2) return State::kMore;
      OnChunk(std::string_view(buf_).substr(0, left_), first_event);
      buf_.erase(0, left_ + 2);
      phase_ = Phase::kChunkSize;
    }
  }
}

class HttpClient : public std::enable_shared_from_this<HttpClient> {
 public:
  HttpClient(asio::io_context& io, asio::ip::tcp::endpoint server, const std::string& request,
             int tokens, Run* run)
      : socket_(io), server_(server), request_(request), tokens_(tokens), run_(run) {}

  void Start() { Connect(); }
  // From the socket's I/O thread only (asio::post).
  void Abort() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }
  const ClientStats& stats() const { return stats_; }

 private:
  void Connect() {
    if (run_->stop) return Exit();
    socket_.async_connect(server_, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) {
        self->stats_.Error("connect: " + ec.message());
        self->Reconnect();
        return;
      }
      self->socket_.set_option(asio::ip::tcp::no_delay(true));
      self->Send();
    });
  }
  void Reconnect() {
    boost::system::error_code ignored;
    socket_.close(ignored);
    Connect();
  }
  void Send() {
    if (run_->stop) return Exit();
    parser_.Reset();
    got_first_ = false;
    start_ = Clock::now();
    asio::async_write(socket_, asio::buffer(request_),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (ec) return self->Failed("write: " + ec.message());
                        self->Read();
                      });
  }
  void Read() {
    socket_.async_read_some(asio::buffer(buf_),
                            [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                              if (ec) return self->Failed("read: " + ec.message());
                              self->OnData(std::string_view(self->buf_.data(), n));
                            });
  }
  void OnData(std::string_view data) {
    bool first = false;
    const auto state = parser_.Feed(data, &first);
    const Clock::time_point now = Clock::now();
    if (first && !got_first_) {
      got_first_ = true;
      first_ = now;
    }
    if (state == SseResponseParser::State::kMore) return Read();
    if (state == SseResponseParser::State::kBad) return Failed("unparseable response");
    if (parser_.status() != 200 || parser_.saw_error() || !parser_.saw_done() ||
        parser_.events() < tokens_) {
      stats_.Error(absl::StrCat("HTTP ", parser_.status(), ", ", parser_.events(),
                                " events, done=", parser_.saw_done(), ": ", parser_.error_body()));
    } else {
      stats_.Record(*run_, start_, first_, now);
    }
    Send();
  }
  void Failed(std::string what) {
    if (run_->stop) return Exit();  // aborted at the end of the level
    stats_.Error(std::move(what));
    Reconnect();
  }
  void Exit() {
    if (exited_) return;
    exited_ = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    run_->ClientExited();
  }

  asio::ip::tcp::socket socket_;
  const asio::ip::tcp::endpoint server_;
  const std::string& request_;
  const int tokens_;
  Run* run_;
  SseResponseParser parser_;
  std::array<char, 16384> buf_{};
  Clock::time_point start_, first_;
  bool got_first_ = false, exited_ = false;
  ClientStats stats_;
};

std::string CompletionRequest(int port, int prompt_tokens, int tokens) {
  std::string prompt;
  for (int i = 1; i <= prompt_tokens; ++i) absl::StrAppend(&prompt, i == 1 ? "" : ",", i);
  const std::string body = absl::StrCat("{\"model\":\"tiny-llama\",\"prompt\":[", prompt,
                                        "],\"max_tokens\":", tokens, ",\"stream\":true}");
  return absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:", port,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\n\r\n", body);
}

// Runs `setup` (which starts the clients), waits out warm-up and window, stops the clients and
// waits for them (aborting what is left after 10 s: those count as stuck).
template <typename Abort>
int64_t RunLevel(Run& run, const Flags& flags, int clients, const std::function<void()>& setup,
                 Abort abort) {
  const auto warmup =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flags.warmup));
  const auto window =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(flags.seconds));
  run.active = clients;
  run.window_begin = Clock::now() + warmup;
  run.window_end = run.window_begin + window;
  setup();
  std::this_thread::sleep_until(run.window_begin);
  const double cpu_begin = ProcessCpuSeconds();
  const double client_begin = run.client_cpu_s ? run.client_cpu_s() : 0;
  std::this_thread::sleep_until(run.window_end);
  run.window_cpu_s = ProcessCpuSeconds() - cpu_begin;
  if (run.client_cpu_s) run.window_client_cpu_s = run.client_cpu_s() - client_begin;
  run.stop = true;
  if (run.WaitIdle(std::chrono::seconds(10))) return 0;
  const int64_t stuck = run.active.load();
  abort();
  run.WaitIdle(std::chrono::seconds(10));
  return stuck;
}

LevelResult RunRouterLevel(const Flags& flags, int port, int clients) {
  Run run;
  const std::string request = CompletionRequest(port, flags.prompt_tokens, flags.tokens);
  const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"),
                                       static_cast<unsigned short>(port));
  std::vector<std::unique_ptr<asio::io_context>> ios;
  for (int i = 0; i < flags.client_threads; ++i)
    ios.push_back(std::make_unique<asio::io_context>());
  std::vector<std::shared_ptr<HttpClient>> all;
  for (int i = 0; i < clients; ++i) {
    all.push_back(
        std::make_shared<HttpClient>(*ios[i % ios.size()], server, request, flags.tokens, &run));
  }
  std::vector<std::thread> threads;
  auto setup = [&] {
    for (auto& c : all) c->Start();
    for (auto& io : ios) threads.emplace_back([&io] { io->run(); });
    run.client_cpu_s = [&threads] { return ThreadsCpuSeconds(threads); };
  };
  auto abort = [&] {
    for (size_t i = 0; i < all.size(); ++i) {
      asio::post(*ios[i % ios.size()], [c = all[i]] { c->Abort(); });
    }
  };
  const int64_t stuck = RunLevel(run, flags, clients, setup, abort);
  for (auto& io : ios) io->stop();
  for (auto& t : threads) t.join();
  std::vector<const ClientStats*> stats;
  for (auto& c : all) stats.push_back(&c->stats());
  LevelResult r = Summarize(run, stats, flags.seconds);
  r.stuck = stuck;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Direct clients: Worker.Generate streams on one channel, back to back per client.

struct DirectClient;

class DirectCall final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  explicit DirectCall(DirectClient* client) : client_(client) {}
  void Start(v1::Worker::Stub* stub, const v1::GenerateRequest& request);
  void Cancel() { context_.TryCancel(); }
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  DirectClient* client_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;
  Clock::time_point start_, first_;
  int received_ = 0;
  bool finished_ = false;
};

struct DirectClient {
  v1::Worker::Stub* stub;
  const v1::GenerateRequest* request;
  int tokens;
  Run* run;
  ClientStats stats;
  std::mutex mu;
  DirectCall* current = nullptr;  // guarded by mu

  // Starts the next call, or exits once the level stops. Never holds `mu` across gRPC calls.
  void Next() {
    DirectCall* call;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (run->stop) {
        run->ClientExited();
        return;
      }
      call = current = new DirectCall(this);
    }
    call->Start(stub, *request);  // an Abort() in between is kept by the context (TryCancel)
  }
  void Finished() {
    std::lock_guard<std::mutex> lock(mu);
    current = nullptr;
  }
  void Abort() {
    std::lock_guard<std::mutex> lock(mu);
    if (current != nullptr) current->Cancel();
  }
};

void DirectCall::Start(v1::Worker::Stub* stub, const v1::GenerateRequest& request) {
  start_ = Clock::now();
  stub->async()->Generate(&context_, &request, this);
  StartRead(&response_);
  StartCall();
}

void DirectCall::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  if (received_++ == 0) first_ = Clock::now();
  if (response_.finished()) finished_ = true;
  StartRead(&response_);
}

void DirectCall::OnDone(const grpc::Status& status) {
  const Clock::time_point end = Clock::now();
  DirectClient* client = client_;
  if (status.ok() && finished_ && received_ == client->tokens) {
    client->stats.Record(*client->run, start_, first_, end);
  } else if (!(client->run->stop && status.error_code() == grpc::StatusCode::CANCELLED)) {
    client->stats.Error(absl::StrCat("gRPC ", status.error_code(), " ", status.error_message(),
                                     ", ", received_, " messages"));
  }
  client->Finished();
  delete this;
  client->Next();
}

LevelResult RunDirectLevel(const Flags& flags, const std::string& worker_address, int clients) {
  Run run;
  auto stub = v1::Worker::NewStub(proto::MakeChannel(worker_address));
  v1::GenerateRequest request;
  request.set_protocol_version(proto::kProtocolVersion);
  request.set_request_id("bench");
  for (int i = 1; i <= flags.prompt_tokens; ++i) request.add_prompt(i);
  request.mutable_params()->set_max_tokens(flags.tokens);
  request.mutable_params()->set_temperature(1.0f);
  std::vector<std::unique_ptr<DirectClient>> all;
  for (int i = 0; i < clients; ++i) {
    all.push_back(std::unique_ptr<DirectClient>(
        new DirectClient{stub.get(), &request, flags.tokens, &run, {}, {}, nullptr}));
  }
  auto setup = [&] {
    for (auto& c : all) c->Next();
  };
  auto abort = [&] {
    for (auto& c : all) c->Abort();
  };
  const int64_t stuck = RunLevel(run, flags, clients, setup, abort);
  std::vector<const ClientStats*> stats;
  for (auto& c : all) stats.push_back(&c->stats);
  LevelResult r = Summarize(run, stats, flags.seconds);
  r.stuck = stuck;
  return r;
}

// ---------------------------------------------------------------------------------------------

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

void PrintRow(int c, const LevelResult& r, const LevelResult& d) {
  const auto ms = [](double s) { return Fmt("%.3f", s * 1e3); };
  std::printf(
      "| %d | %.0f | %.0f | %.2f | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s |"
      " %.0f (%.0f) / %.0f | %.0f | %lld / %lld |\n",
      c, r.rps, d.rps, d.rps > 0 ? r.rps / d.rps : 0.0, ms(r.e2e_p50).c_str(),
      ms(r.e2e_p99).c_str(), ms(d.e2e_p50).c_str(), ms(d.e2e_p99).c_str(),
      ms(r.e2e_p50 - d.e2e_p50).c_str(), ms(r.e2e_p99 - d.e2e_p99).c_str(), ms(r.ttft_p50).c_str(),
      ms(r.ttft_p99).c_str(), ms(d.ttft_p50).c_str(), ms(d.ttft_p99).c_str(), r.cpu_us_per_req,
      r.client_cpu_us_per_req, d.cpu_us_per_req,
      r.cpu_us_per_req - r.client_cpu_us_per_req - d.cpu_us_per_req,
      static_cast<long long>(r.errors + r.stuck), static_cast<long long>(d.errors + d.stuck));
  std::fflush(stdout);
}

void PrintProblems(const char* side, int c, const LevelResult& r) {
  if (r.errors == 0 && r.stuck == 0) return;
  std::fprintf(stderr, "%s, %d streams: %lld errors, %lld stuck at the end; first error: %s\n",
               side, c, static_cast<long long>(r.errors), static_cast<long long>(r.stuck),
               r.first_error.c_str());
}

struct Cluster {
  std::unique_ptr<FakeWorkerService> service;
  std::unique_ptr<grpc::Server> worker;
  std::string worker_address;
  std::unique_ptr<router::Router> router;
  std::unique_ptr<Registration> registration;
};

absl::Status StartCluster(const Flags& flags, Cluster& c) {
  c.service = std::make_unique<FakeWorkerService>(flags.tokens);
  grpc::ServerBuilder builder;
  proto::ConfigureServer(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(c.service.get());
  c.worker = builder.BuildAndStart();
  if (c.worker == nullptr || port == 0) return absl::UnavailableError("fake worker cannot listen");
  c.worker_address = absl::StrCat("127.0.0.1:", port);

  auto model_dir = ResolveModelPath("preset:tiny-llama");
  if (!model_dir.ok()) return model_dir.status();
  router::RouterOptions ro;
  ro.model_dir = *model_dir;
  ro.model_name = "tiny-llama";
  ro.http_port = 0;
  ro.grpc_port = 0;
  ro.http_threads = flags.router_threads;
  ro.placement.max_inflight_per_worker = flags.max_inflight;
  auto router = router::Router::Create(ro);
  if (!router.ok()) return router.status();
  c.router = std::move(*router);
  if (absl::Status s = c.router->Start(); !s.ok()) return s;

  v1::WorkerInfo info;
  info.set_id("fake-0");
  info.set_role(v1::ROLE_MIXED);
  info.set_grpc_address(c.worker_address);
  info.set_http_address("127.0.0.1:1");
  info.set_model("tiny-llama");
  info.set_model_identity("router-bench-fake");
  info.set_block_size(16);
  info.set_num_kv_blocks(1 << 16);
  info.set_max_model_len(4096);
  c.registration = std::make_unique<Registration>(absl::StrCat("127.0.0.1:", c.router->grpc_port()),
                                                  std::move(info));
  for (int i = 0; i < 200 && !c.router->Ready(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return c.router->Ready() ? absl::OkStatus()
                           : absl::DeadlineExceededError("the fake worker never registered");
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    if (!ParseFlag(argv[i], flags)) {
      std::fprintf(stderr, "bad flag %s (see the comment atop bench/router_bench.cc)\n", argv[i]);
      return 2;
    }
  }
  RaiseFileLimit();
  if (flags.absl_deadlock_check == 0) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  Cluster cluster;
  if (absl::Status s = StartCluster(flags, cluster); !s.ok()) {
    std::fprintf(stderr, "cannot start: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf(
      "# %d tokens per request, %d-token prompt, %.1f s window after %.1f s warm-up, "
      "router http_threads=%d, client threads=%d; latencies in ms\n\n",
      flags.tokens, flags.prompt_tokens, flags.seconds, flags.warmup, flags.router_threads,
      flags.client_threads);
  std::printf(
      "| streams | router req/s | direct req/s | ratio | router e2e p50 / p99 | "
      "direct e2e p50 / p99 | added p50 / p99 | router TTFT p50 / p99 | "
      "direct TTFT p50 / p99 | CPU us/req router (load gen) / direct | router-added CPU us/req | "
      "errors router / direct |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int c : flags.concurrency) {
    const LevelResult r = RunRouterLevel(flags, cluster.router->http_port(), c);
    const LevelResult d = RunDirectLevel(flags, cluster.worker_address, c);
    PrintRow(c, r, d);
    PrintProblems("router", c, r);
    PrintProblems("direct", c, d);
  }
  cluster.registration.reset();
  cluster.router->Shutdown(absl::Seconds(1));
  cluster.worker->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) { return strata::bench::Main(argc, argv); }
