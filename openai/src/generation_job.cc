#include "src/generation_job.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/resume.h"

namespace strata::openai::internal {
namespace {

struct ChoiceState {
  std::string text;
  std::vector<SampleResult> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  bool finished = false;
  bool role_sent = false;         // chat streams: the {"role":"assistant"} delta went out
  bool echo_sent = false;         // completion streams: the echoed prompt went out
  int64_t tokens = 0;             // tokens received
  int64_t completion_tokens = 0;  // as reported by the backend
  int64_t cached_tokens = 0;
  int64_t text_offset = 0;  // completions logprobs' running text_offset
  int64_t chunks = 0;       // stream chunks of this choice so far (sent or skipped)
  std::optional<absl::Time> last_token_at;
  // Chat streams with tools: the parser holding back text that may be a call, the calls sent,
  // and logprobs waiting for the content they belong to.
  std::unique_ptr<ToolCallStreamParser> tool_parser;
  int tool_calls_sent = 0;
  std::vector<SampleResult> pending_logprobs;
};

// Shared by the backend callbacks (strong references, released by the backend after a
// request's last event) and the writer's OnClose callback (a weak reference).
class Job : public std::enable_shared_from_this<Job> {
 public:
  Job(JobSpec spec, const JobContext& context, std::shared_ptr<http::ResponseWriter> writer)
      : spec_(std::move(spec)),
        context_(context),
        writer_(std::move(writer)),
        choices_(spec_.prompts.size() * spec_.n),
        handles_(choices_.size()),
        unfinished_(static_cast<int>(choices_.size())),
        record_(RecordFor(spec_)) {}

  void Start();

 private:
  GenerateRequest RequestFor(int choice) const;
  // The echoed prompt text of `choice` (empty without echo).
  const std::string& EchoFor(int choice) const {
    static const std::string* const kNone = new std::string();
    return spec_.echo.empty() ? *kNone : spec_.echo[choice / spec_.n];
  }
  void OnEvent(int choice, GenerateEvent event);
  void OnClientGone();
  // These run under mu_ and leave the request `done_`; they return the record to report.
  void AccumulateLocked(int choice, GenerateEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StreamLocked(int choice, const GenerateEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StreamToolsLocked(int choice, const GenerateEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The calls a choice may still return (parallel_tool_calls: false keeps the first), ids set.
  std::vector<ToolCall> KeepCalls(std::vector<ToolCall> calls, int already) const;
  void CompleteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(ApiError error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Usage UsageLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<GenerationHandle*> HandlesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `choice` >= 0: one of that choice's chunks, which a keyed stream numbers (its SSE id) and
  // skips when the client has it already (Last-Event-ID).
  void WriteLocked(const OrderedJson& chunk, int choice = -1) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the record once the request is done (call without mu_).
  void ReportIfDone();

  const JobSpec spec_;
  const JobContext context_;
  const std::shared_ptr<http::ResponseWriter> writer_;

  absl::Mutex mu_;
  std::vector<ChoiceState> choices_ ABSL_GUARDED_BY(mu_);
  // Destroyed only with the Job, so raw pointers taken under mu_ stay valid for Cancel().
  std::vector<std::unique_ptr<GenerationHandle>> handles_ ABSL_GUARDED_BY(mu_);
  int unfinished_ ABSL_GUARDED_BY(mu_);
  bool stream_started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // responded, failed or the client left
  bool reported_ ABSL_GUARDED_BY(mu_) = false;
  RequestRecord record_ ABSL_GUARDED_BY(mu_);
};

GenerateRequest Job::RequestFor(int choice) const {
  const int prompt = choice / spec_.n;
  GenerateRequest r;
  r.request_id = absl::StrCat(spec_.meta.id, "-", choice);
  r.model = spec_.meta.model;
  r.prompt = spec_.prompts[prompt];
  r.params = spec_.params;
  r.params.max_tokens = spec_.max_tokens[prompt];
  // Choice i of every prompt gets seed + i: the same prompt and seed give the same choices.
  if (r.params.seed) *r.params.seed += static_cast<uint64_t>(choice % spec_.n);
  r.slo_class = spec_.slo_class;
  r.api_key_id = spec_.api_key_id;
  r.stream = spec_.stream;
  if (!spec_.idempotency_key.empty()) {
    r.idempotency_key = absl::StrCat(spec_.idempotency_key, "#", choice);
    r.resume_only = !spec_.resume_after.empty() && spec_.resume_after[choice] > 0;
  }
  return r;
}

void Job::Start() {
  std::weak_ptr<Job> weak = weak_from_this();
  writer_->OnClose([weak] {
    if (std::shared_ptr<Job> job = weak.lock()) job->OnClientGone();
  });
  std::shared_ptr<Job> self = shared_from_this();
  for (int c = 0; c < static_cast<int>(handles_.size()); ++c) {
    {
      absl::MutexLock lock(&mu_);
      if (done_) break;
    }
    // Not under mu_: the backend may deliver events (and so lock mu_) before returning.
    std::unique_ptr<GenerationHandle> handle = context_.backend->Generate(
        RequestFor(c), [self, c](GenerateEvent event) { self->OnEvent(c, std::move(event)); });
    GenerationHandle* cancel = nullptr;
    {
      absl::MutexLock lock(&mu_);
      handles_[c] = std::move(handle);
      if (done_) cancel = handles_[c].get();
    }
    if (cancel != nullptr) cancel->Cancel();
  }
}

void Job::OnEvent(int choice, GenerateEvent event) {
  std::vector<GenerationHandle*> cancel;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    if (!event.status.ok() || event.finish_reason == FinishReason::kAbort) {
      ApiError error = event.status.ok()
                           ? ApiErrorFromStatus(absl::AbortedError("generation aborted"))
                           : ApiErrorFromStatus(event.status);
      if (error.http_status == 499) {  // cancelled by someone else than this client
        error.http_status = 503;
        error.type = "server_error";
      }
      FailLocked(std::move(error));
      cancel = HandlesLocked();
    } else {
      AccumulateLocked(choice, event);
      if (spec_.stream) StreamLocked(choice, event);
      if (event.finished && --unfinished_ == 0) CompleteLocked();
    }
  }
  for (GenerationHandle* h : cancel) h->Cancel();
  ReportIfDone();
}

void Job::OnClientGone() {
  std::vector<GenerationHandle*> cancel;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    record_.cancelled = true;
    record_.failed = true;
    record_.http_status = 499;
    FinishLocked();
    cancel = HandlesLocked();
  }
  for (GenerationHandle* h : cancel) h->Cancel();
  ReportIfDone();
}

void Job::AccumulateLocked(int choice, GenerateEvent& event) {
  ChoiceState& c = choices_[choice];
  const absl::Time now = absl::Now();
  if (!event.tokens.empty()) {
    if (record_.ttft == absl::InfiniteDuration()) record_.ttft = now - spec_.arrival;
    if (c.last_token_at) record_.inter_token_gaps.push_back(now - *c.last_token_at);
    c.last_token_at = now;
  }
  c.tokens += static_cast<int64_t>(event.tokens.size());
  c.completion_tokens = std::max<int64_t>(c.completion_tokens, event.completion_tokens);
  c.cached_tokens = std::max<int64_t>(c.cached_tokens, event.cached_tokens);
  if (!spec_.stream) {
    c.text += event.text;
    for (SampleResult& s : event.logprobs) c.logprobs.push_back(std::move(s));
  }
  if (event.finished) {
    c.finished = true;
    c.finish_reason = event.finish_reason;
  }
}

void Job::WriteLocked(const OrderedJson& chunk, int choice) {
  if (!stream_started_) {
    stream_started_ = true;
    writer_->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  }
  if (choice < 0 || spec_.idempotency_key.empty()) {
    writer_->Write(SseData(chunk));
    return;
  }
  const int64_t n = ++choices_[choice].chunks;
  if (!spec_.resume_after.empty() && n <= spec_.resume_after[choice]) return;
  std::vector<int64_t> ids(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    ids[i] = std::max(choices_[i].chunks,
                      spec_.resume_after.empty() ? int64_t{0} : spec_.resume_after[i]);
  }
  writer_->Write(absl::StrCat("id: ", StreamEventId(ids), "\n", SseData(chunk)));
}

void Job::StreamLocked(int choice, const GenerateEvent& event) {
  ChoiceState& c = choices_[choice];
  const Tokenizer& tok = *context_.tokenizer;
  const bool has_output = !event.text.empty() || !event.logprobs.empty();
  const FinishReason finish = event.finished ? event.finish_reason : FinishReason::kNone;
  if (spec_.endpoint == Endpoint::kCompletions) {
    // echo: the prompt's text leads the choice's first chunk.
    const std::string& echo = EchoFor(choice);
    const bool echo_now = !c.echo_sent && !echo.empty();
    if (!has_output && !echo_now && !event.finished) return;
    c.echo_sent = true;
    OrderedJson lp = spec_.logprobs ? CompletionLogprobsJson(tok, event.logprobs, &c.text_offset)
                                    : OrderedJson(nullptr);
    WriteLocked(CompletionChunkJson(spec_.meta, choice, echo_now ? echo + event.text : event.text,
                                    std::move(lp), finish, spec_.include_usage),
                choice);
    return;
  }
  if (!c.role_sent) {
    c.role_sent = true;
    WriteLocked(ChatChunkJson(spec_.meta, choice, {{"role", "assistant"}, {"content", ""}},
                              nullptr, FinishReason::kNone, spec_.include_usage),
                choice);
  }
  if (spec_.tool_parser != ToolCallParser::kNone) return StreamToolsLocked(choice, event);
  if (has_output) {
    OrderedJson lp =
        spec_.logprobs ? ChatLogprobsJson(tok, event.logprobs) : OrderedJson(nullptr);
    WriteLocked(ChatChunkJson(spec_.meta, choice, {{"content", event.text}}, std::move(lp),
                              FinishReason::kNone, spec_.include_usage),
                choice);
  }
  if (event.finished) {
    WriteLocked(ChatChunkJson(spec_.meta, choice, OrderedJson::object(), nullptr, finish,
                              spec_.include_usage),
                choice);
  }
}

std::vector<ToolCall> Job::KeepCalls(std::vector<ToolCall> calls, int already) const {
  if (!spec_.parallel_tool_calls) {
    calls.resize(already > 0 ? 0 : std::min<size_t>(calls.size(), 1));
  }
  for (ToolCall& call : calls) call.id = NewToolCallId(spec_.tool_parser);
  return calls;
}

// Content the parser releases goes out as content deltas (with the logprobs of the tokens
// so far), each call as one delta.tool_calls entry with its whole arguments; the last chunk's
// finish_reason is "tool_calls" once a call went out.
void Job::StreamToolsLocked(int choice, const GenerateEvent& event) {
  ChoiceState& c = choices_[choice];
  if (c.tool_parser == nullptr) {
    c.tool_parser = std::make_unique<ToolCallStreamParser>(spec_.tool_parser);
  }
  ToolCallOutput out = c.tool_parser->Feed(event.text);
  if (event.finished) {
    ToolCallOutput rest = c.tool_parser->Finish();
    out.content += rest.content;
    for (ToolCall& call : rest.calls) out.calls.push_back(std::move(call));
  }
  if (spec_.logprobs) {
    c.pending_logprobs.insert(c.pending_logprobs.end(), event.logprobs.begin(),
                              event.logprobs.end());
  }
  const Tokenizer& tok = *context_.tokenizer;
  auto take_logprobs = [&]() -> OrderedJson {
    if (!spec_.logprobs || c.pending_logprobs.empty()) return nullptr;
    OrderedJson lp = ChatLogprobsJson(tok, c.pending_logprobs);
    c.pending_logprobs.clear();
    return lp;
  };
  if (!out.content.empty()) {
    WriteLocked(ChatChunkJson(spec_.meta, choice, {{"content", out.content}}, take_logprobs(),
                              FinishReason::kNone, spec_.include_usage),
                choice);
  }
  for (const ToolCall& call : KeepCalls(std::move(out.calls), c.tool_calls_sent)) {
    WriteLocked(ChatChunkJson(spec_.meta, choice,
                              {{"tool_calls", ToolCallsJson({&call, 1}, c.tool_calls_sent)}},
                              nullptr, FinishReason::kNone, spec_.include_usage),
                choice);
    ++c.tool_calls_sent;
  }
  if (event.finished) {
    OrderedJson finish =
        c.tool_calls_sent > 0 ? OrderedJson("tool_calls") : FinishReasonJson(event.finish_reason);
    WriteLocked(ChatChunkJsonWithFinish(spec_.meta, choice, OrderedJson::object(), take_logprobs(),
                                        std::move(finish), spec_.include_usage),
                choice);
  }
}

Usage Job::UsageLocked() const {
  Usage usage;
  for (size_t p = 0; p < spec_.prompts.size(); ++p) {
    // Each prompt is counted once however many choices it has, as OpenAI does.
    usage.prompt_tokens += static_cast<int64_t>(spec_.prompts[p].size());
    usage.cached_tokens += choices_[p * spec_.n].cached_tokens;
  }
  for (const ChoiceState& c : choices_) {
    usage.completion_tokens += std::max(c.tokens, c.completion_tokens);
  }
  return usage;
}

void Job::CompleteLocked() {
  const Usage usage = UsageLocked();
  Usage shown = usage;  // what the client reads; the record keeps the real count
  if (spec_.hide_cached_tokens) shown.cached_tokens = 0;
  const bool chat = spec_.endpoint == Endpoint::kChat;
  if (spec_.stream) {
    if (spec_.include_usage) {
      WriteLocked(
          UsageChunkJson(spec_.meta, chat ? "chat.completion.chunk" : "text_completion", shown));
    }
    writer_->Write(std::string(kSseDone));
    writer_->End();
  } else {
    std::vector<ChoiceOutput> out(choices_.size());
    for (size_t i = 0; i < choices_.size(); ++i) {
      out[i].index = static_cast<int>(i);
      out[i].text = EchoFor(static_cast<int>(i)) + choices_[i].text;
      out[i].logprobs = std::move(choices_[i].logprobs);
      out[i].finish_reason = choices_[i].finish_reason;
      if (chat && spec_.tool_parser != ToolCallParser::kNone) {
        ToolCallOutput parsed = ParseToolCalls(spec_.tool_parser, out[i].text);
        out[i].tool_calls = KeepCalls(std::move(parsed.calls), 0);
        if (!out[i].tool_calls.empty()) out[i].text = std::move(parsed.content);
      }
    }
    const Tokenizer& tok = *context_.tokenizer;
    OrderedJson body = chat ? ChatResponseJson(spec_.meta, out, shown, tok, spec_.logprobs)
                            : CompletionResponseJson(spec_.meta, out, shown, tok, spec_.logprobs);
    writer_->Respond(200, "application/json", DumpJson(body));
  }
  record_.http_status = 200;
  record_.prompt_tokens = usage.prompt_tokens;
  record_.cached_tokens = usage.cached_tokens;
  record_.completion_tokens = usage.completion_tokens;
  FinishLocked();
}

void Job::FailLocked(ApiError error) {
  if (stream_started_) {
    // Too late for a status code: an SSE error event, then the usual terminator.
    writer_->Write(SseData(ErrorJson(error)));
    writer_->Write(std::string(kSseDone));
    writer_->End();
  } else {
    RespondApiError(*writer_, error);
    record_.http_status = error.http_status;
  }
  record_.failed = true;
  const Usage usage = UsageLocked();
  record_.prompt_tokens = usage.prompt_tokens;
  record_.completion_tokens = usage.completion_tokens;
  FinishLocked();
}

void Job::FinishLocked() {
  done_ = true;
  record_.e2e = absl::Now() - spec_.arrival;
}

std::vector<GenerationHandle*> Job::HandlesLocked() const {
  std::vector<GenerationHandle*> out;
  for (const auto& h : handles_) {
    if (h != nullptr) out.push_back(h.get());
  }
  return out;
}

void Job::ReportIfDone() {
  std::optional<RequestRecord> record;
  {
    absl::MutexLock lock(&mu_);
    if (!done_ || reported_) return;
    reported_ = true;
    record = std::move(record_);
  }
  if (context_.observer != nullptr) context_.observer->OnFinished(*record);
}

}  // namespace

const char* EndpointPath(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

RequestRecord RecordFor(const JobSpec& spec) {
  RequestRecord r;
  r.endpoint = EndpointPath(spec.endpoint);
  r.model = spec.meta.model;
  r.slo_class = spec.slo_class;
  r.api_key_id = spec.api_key_id;
  r.unknown_params = spec.unknown_params;
  r.stream = spec.stream;
  r.n = spec.n;
  r.rate_charged_output_tokens = spec.rate_charged_output_tokens;
  return r;
}

void RespondApiError(http::ResponseWriter& writer, const ApiError& error) {
  std::map<std::string, std::string> headers;
  if (error.retry_after_s > 0) headers["Retry-After"] = std::to_string(error.retry_after_s);
  writer.Respond(error.http_status, "application/json", DumpJson(ErrorJson(error)),
                 std::move(headers));
}

void StartJob(JobSpec spec, const JobContext& context,
              std::shared_ptr<http::ResponseWriter> writer) {
  auto job = std::make_shared<Job>(std::move(spec), context, std::move(writer));
  job->Start();
}

}  // namespace strata::openai::internal
