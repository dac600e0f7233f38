// Open-loop dispatch (a timer chain on one strand) and the run's lifecycle; the per-request
// HTTP/SSE work is in stream_session.cc.
#include "strata/replay/replayer.h"

#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "strata/common/status_macros.h"
#include "stream_session.h"

namespace strata::replay {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using internal::Clock;
using tcp = asio::ip::tcp;

namespace {
bool ConsumePrefix(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}
}  // namespace

const char* ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kNone: return "none";
    case ErrorKind::kConnect: return "connect";
    case ErrorKind::kHttp4xx: return "http_4xx";
    case ErrorKind::kHttp5xx: return "http_5xx";
    case ErrorKind::kStream: return "stream";
    case ErrorKind::kTimeout: return "timeout";
  }
  return "unknown";
}

absl::StatusOr<ServerUrl> ParseServerUrl(std::string_view url) {
  std::string_view rest = url;
  ServerUrl out;
  out.tls = ConsumePrefix(&rest, "https://");
  if (!out.tls && !ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--url must start with http:// or https://: ", std::string(url)));
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.base_path = path.empty() ? "/v1" : std::string(path);
  const size_t colon = authority.rfind(':');
  out.host = std::string(authority.substr(0, colon));
  out.port = colon == std::string_view::npos ? (out.tls ? "443" : "80")
                                             : std::string(authority.substr(colon + 1));
  int port = 0;
  if (out.host.empty() || !absl::SimpleAtoi(out.port, &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --url (want http[s]://HOST:PORT[/v1]): ", std::string(url)));
  }
  return out;
}

namespace {

std::string HostHeader(const ServerUrl& url) { return absl::StrCat(url.host, ":", url.port); }

std::string Scheme(const ServerUrl& url) { return url.tls ? "https://" : "http://"; }

absl::StatusOr<ModelInfo> ParseModels(int status, const std::string& body) {
  if (status != 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("GET /models answered HTTP ", status, ": ", body.substr(0, 200)));
  }
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string()) {
    return absl::InvalidArgumentError("GET /models: no model in the answer");
  }
  const nlohmann::json& m = j["data"][0];
  ModelInfo info;
  info.id = m["id"];
  if (m.contains("max_model_len") && m["max_model_len"].is_number_integer()) {
    info.max_model_len = m["max_model_len"];
  }
  if (m.contains("vocab_size") && m["vocab_size"].is_number_integer()) {
    info.vocab_size = m["vocab_size"];
  }
  return info;
}

// Lets one run keep many thousands of sockets open.
void RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// GET <base><path> with a deadline: (status, body); Unavailable when the server cannot be
// reached (or, over https, not verified) or answers too much (over 1 MiB) or too late.
absl::StatusOr<std::pair<int, std::string>> HttpGet(const ServerUrl& url, const std::string& path,
                                                    const std::string& api_key, double timeout_s) {
  std::shared_ptr<asio::ssl::context> tls;
  if (url.tls) {
    STRATA_ASSIGN_OR_RETURN(tls, internal::MakeClientTlsContext(url.ca_file));
  }
  asio::io_context ioc;
  internal::ClientStream stream(ioc.get_executor(), tls.get(), url.host);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, HostHeader(url));
  if (!api_key.empty()) req.set(http::field::authorization, absl::StrCat("Bearer ", api_key));
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 20);
  beast::flat_buffer buffer;
  // Asynchronous operations with a deadline, run to completion on this thread.
  if (!ec) {
    stream.Connect(endpoints, Clock::now() + timeout, [&](beast::error_code e) {
      if ((ec = e)) return;
      stream.With([&](auto& s) {
        http::async_write(s, req, [&](beast::error_code e2, size_t) {
          if ((ec = e2)) return;
          stream.With([&](auto& s2) {
            http::async_read(s2, buffer, parser, [&](beast::error_code e3, size_t) { ec = e3; });
          });
        });
      });
    });
    ioc.run();
  }
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot reach ", Scheme(url), HostHeader(url), path,
                                               ": ", stream.Describe(ec)));
  }
  return std::make_pair(static_cast<int>(parser.get().result_int()), parser.get().body());
}

}  // namespace

absl::StatusOr<ModelInfo> FetchModelInfo(const ServerUrl& url, const std::string& api_key,
                                         double timeout_s) {
  STRATA_ASSIGN_OR_RETURN(auto res, HttpGet(url, url.base_path + "/models", api_key, timeout_s));
  return ParseModels(res.first, res.second);
}

std::string FetchServerDevice(const ServerUrl& url, const std::string& api_key, double timeout_s) {
  absl::StatusOr<std::pair<int, std::string>> res =
      HttpGet(url, "/server_info", api_key, timeout_s);
  if (!res.ok() || res->first != 200) return "";
  const nlohmann::json j = nlohmann::json::parse(res->second, nullptr, false);
  if (!j.is_object()) return "";
  auto it = j.find("device");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::StatusOr<std::unique_ptr<Replayer>> Replayer::Create(ReplayOptions options) {
  if (options.io_threads < 1) return absl::InvalidArgumentError("io_threads must be >= 1");
  if (!(options.timeout_s > 0)) return absl::InvalidArgumentError("timeout must be > 0");
  if (options.model.empty()) return absl::InvalidArgumentError("model name is required");
  if (options.url.host.empty()) return absl::InvalidArgumentError("url is required");
  if (options.attempts < 1 || options.attempts > 100) {
    return absl::InvalidArgumentError("attempts must be in 1..100");
  }
  return std::unique_ptr<Replayer>(new Replayer(std::move(options)));
}

Replayer::~Replayer() = default;

namespace {

template <typename Prompt>
std::string CompletionBody(const std::string& model, const Prompt& prompt, int32_t max_tokens) {
  nlohmann::ordered_json body;
  body["model"] = model;
  body["prompt"] = prompt;
  body["max_tokens"] = max_tokens;
  body["temperature"] = 0;
  body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return body.dump();
}

}  // namespace

std::string Replayer::RequestBody(const std::string& model, const std::vector<int32_t>& prompt,
                                  int32_t max_tokens) {
  return CompletionBody(model, prompt, max_tokens);
}

std::string Replayer::RequestBody(const std::string& model, const std::string& prompt_text,
                                  int32_t max_tokens) {
  return CompletionBody(model, prompt_text, max_tokens);
}

absl::StatusOr<PromptSource> ParsePromptSource(std::string_view name) {
  if (name == "auto") return PromptSource::kAuto;
  if (name == "tokens") return PromptSource::kTokens;
  if (name == "text") return PromptSource::kText;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown prompt source '", std::string(name), "' (expected auto, tokens or text)"));
}

namespace {

// State shared by the dispatcher, the sessions and Run's reporting loop for one run.
struct RunState {
  const std::vector<TraceRequest>* requests;
  const PromptSynthesizer* prompts;
  PromptSource prompt_source = PromptSource::kAuto;
  std::string model;
  internal::StreamSession::Target target;
  std::vector<RequestResult> results;
  Clock::time_point origin;
  ReplayProgress progress;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> finished;  // Guarded by mu.
};

void OnRequestDone(RunState* s, int64_t i) {
  if (!s->results[i].ok()) s->progress.errors.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->finished.push_back(i);
    s->progress.done.fetch_add(1);
  }
  s->cv.notify_one();
}

bool SendsText(PromptSource source, const TraceRequest& req) {
  return source == PromptSource::kText || (source == PromptSource::kAuto && !req.prompt.empty());
}

// The request body: the trace's text or synthesized token ids (per s->prompt_source).
absl::StatusOr<std::string> BodyFor(const RunState* s, const TraceRequest& req, int64_t i) {
  if (SendsText(s->prompt_source, req)) {
    return Replayer::RequestBody(s->model, req.prompt, req.output_tokens);
  }
  absl::StatusOr<std::vector<int32_t>> prompt = s->prompts->Synthesize(req, i);
  if (!prompt.ok()) return prompt.status();
  return Replayer::RequestBody(s->model, *prompt, req.output_tokens);
}

void Launch(asio::io_context& ioc, RunState* s, int64_t i) {
  const TraceRequest& req = (*s->requests)[i];
  s->progress.sent.fetch_add(1);
  absl::StatusOr<std::string> body = BodyFor(s, req, i);
  if (!body.ok()) {  // Checked up front in Run; kept as a per-request error, never a crash.
    RequestResult& r = s->results[i];
    r.send_s = internal::SecondsSince(s->origin);
    r.error = ErrorKind::kConnect;
    r.error_type = "prompt_error";
    r.error_message = std::string(body.status().message());
    return OnRequestDone(s, i);
  }
  auto session = std::make_shared<internal::StreamSession>(
      asio::make_strand(ioc), &s->target, *std::move(body), &s->results[i], s->origin,
      [s, i] { OnRequestDone(s, i); });
  if (s->target.attempts > 1) session->SetIdempotencyKey(absl::StrCat(s->target.key_prefix, i));
  session->Start();
}

// Sends every request that is due, then sleeps until the next one is. Runs on one strand.
void Dispatch(asio::io_context& ioc, asio::steady_timer& timer, RunState* s, size_t next) {
  const auto& reqs = *s->requests;
  while (next < reqs.size() && internal::SecondsSince(s->origin) >= reqs[next].arrival_s) {
    Launch(ioc, s, static_cast<int64_t>(next++));
  }
  if (next == reqs.size()) return;
  timer.expires_at(s->origin + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(reqs[next].arrival_s)));
  timer.async_wait([&ioc, &timer, s, next](beast::error_code) { Dispatch(ioc, timer, s, next); });
}

absl::Status CheckRequests(const std::vector<TraceRequest>& requests, PromptSource source) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const TraceRequest& r = requests[i];
    if (source == PromptSource::kText && r.prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", i, " (trace line ", r.line,
          ") has no prompt text; prompt source 'text' needs a trace with a prompt on every line "
          "(a clipped input loses its text)"));
    }
    if (i > 0 && r.arrival_s < requests[i - 1].arrival_s) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": arrivals not sorted"));
    }
    const size_t blocks = (static_cast<size_t>(r.input_tokens) + kTraceBlockTokens - 1) /
                          kTraceBlockTokens;
    if (r.input_tokens < 0 || r.output_tokens < 0 ||
        (!r.block_ids.empty() && r.block_ids.size() != blocks)) {
      return absl::InvalidArgumentError(absl::StrCat("request ", i, " (trace line ", r.line,
                                                     "): inconsistent lengths"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RequestResult>> Replayer::Run(const std::vector<TraceRequest>& requests,
                                                         const PromptSynthesizer& prompts,
                                                         const ProgressCallback& on_progress,
                                                         double progress_interval_s) {
  if (absl::Status st = CheckRequests(requests, options_.prompt_source); !st.ok()) return st;
  RaiseOpenFileLimit();
  asio::io_context ioc(options_.io_threads);
  RunState s;
  s.requests = &requests;
  s.prompts = &prompts;
  s.prompt_source = options_.prompt_source;
  s.model = options_.model;
  beast::error_code ec;
  s.target.endpoints = tcp::resolver(ioc).resolve(options_.url.host, options_.url.port, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", options_.url.host, ": ", ec.message()));
  }
  if (options_.url.tls) {
    STRATA_ASSIGN_OR_RETURN(s.target.tls, internal::MakeClientTlsContext(options_.url.ca_file));
  }
  s.target.host = options_.url.host;
  s.target.host_header = HostHeader(options_.url);
  s.target.path = options_.url.base_path + "/completions";
  s.target.api_key = options_.api_key;
  s.target.timeout_s = options_.timeout_s;
  s.target.attempts = options_.attempts;
  {
    // Unique per run, so that a replay never collides with another's requests.
    absl::BitGen gen;
    s.target.key_prefix = absl::StrFormat("strata-replay-%016x-", absl::Uniform<uint64_t>(gen));
  }
  s.results.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    RequestResult& r = s.results[i];
    r.index = static_cast<int64_t>(i);
    r.trace_line = requests[i].line;
    r.input_tokens = requests[i].input_tokens;
    r.max_tokens = requests[i].output_tokens;
    r.scheduled_s = requests[i].arrival_s;
  }
  auto work = asio::make_work_guard(ioc);
  asio::steady_timer timer(asio::make_strand(ioc));
  s.origin = Clock::now();
  asio::post(timer.get_executor(), [&] { Dispatch(ioc, timer, &s, 0); });
  std::vector<std::thread> threads;
  for (int t = 0; t < options_.io_threads; ++t) threads.emplace_back([&ioc] { ioc.run(); });

  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(progress_interval_s));
  const int64_t n = static_cast<int64_t>(requests.size());
  auto next_report = Clock::now() + interval;
  for (bool all_done = false; !all_done;) {
    std::vector<int64_t> finished;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait_until(lock, next_report, [&] { return s.progress.done.load() == n; });
      all_done = s.progress.done.load() == n;
      if (!all_done && Clock::now() < next_report) continue;
      finished.swap(s.finished);
    }
    next_report = Clock::now() + interval;
    std::vector<const RequestResult*> final_results;
    for (int64_t i : finished) final_results.push_back(&s.results[i]);
    if (on_progress) on_progress(s.progress, final_results);
  }
  work.reset();
  for (auto& t : threads) t.join();
  return std::move(s.results);
}

}  // namespace strata::replay
