#include "strata/openai/frontend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "src/generation_job.h"
#include "src/request_pool.h"
#include "src/resume.h"
#include "strata/common/logging.h"
#include "strata/common/memory_limit.h"
#include "strata/openai/format.h"

namespace strata::openai {
namespace {

using internal::Endpoint;
using internal::JobSpec;

// The server lower-cases header names; read the map directly (no dependency on the http
// implementation for unit tests).
std::string HeaderValue(const http::Request& request, const std::string& lower_name) {
  auto it = request.headers.find(lower_name);
  return it == request.headers.end() ? std::string() : it->second;
}

std::string RandomHex() {
  thread_local absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

void RespondJson(http::ResponseWriter& writer, int status, const OrderedJson& body) {
  writer.Respond(status, "application/json", DumpJson(body));
}

// One entry of GET /v1/models (OpenAI's model object, with the limits a client needs).
OrderedJson ModelObject(const ServedModel& served, int64_t created) {
  OrderedJson model = OrderedJson::object();
  model["id"] = served.name;
  model["object"] = "model";
  model["created"] = created;
  model["owned_by"] = "strata";
  model["max_model_len"] = served.max_model_len;
  model["vocab_size"] = served.vocab_size;  // token-array prompts must stay below it
  return model;
}

// SamplingParams::Validate messages start with the parameter's name.
ApiError SamplingError(const absl::Status& status) {
  std::string message(status.message());
  std::string param = message.substr(0, message.find_first_of(" :"));
  return ApiError::BadRequest(std::move(message), std::move(param));
}

// The chat prompt: the template rendered with or without the assistant turn's opening, or,
// continuing the final message (vLLM's continue_final_message, as HF's apply_chat_template
// does it), rendered without it and cut right after the final message's content (stripped of
// surrounding whitespace), so that no end-of-turn follows it.
// Tools in use reach the template as its `tools` (HF's apply_chat_template(tools=...));
// tool_choice "none" renders the prompt without them.
absl::StatusOr<std::string> RenderChat(const ChatTemplate& tmpl,
                                       const nlohmann::ordered_json& messages,
                                       bool add_generation_prompt, bool continue_final_message,
                                       const nlohmann::ordered_json& kwargs,
                                       const ToolsSpec& tools) {
  nlohmann::ordered_json context = kwargs;
  if (tools.active()) context["tools"] = tools.tools;
  absl::StatusOr<std::string> rendered =
      tmpl.Render(messages, add_generation_prompt && !continue_final_message, context);
  if (!rendered.ok() || !continue_final_message) return rendered;
  const std::string content = messages.back()["content"].get<std::string>();
  const std::string final_text(absl::StripAsciiWhitespace(content));
  const size_t at = rendered->rfind(final_text);
  if (at == std::string::npos) {
    return absl::InvalidArgumentError(
        "continue_final_message: the chat template does not render the final message's "
        "content as sent");
  }
  rendered->resize(at + final_text.size());
  return rendered;
}

// Distinct unknown field names logged per process; later ones are counted, not named.
constexpr size_t kMaxUnknownNamesLogged = 64;

}  // namespace

absl::Status ParseLoadFormat(std::string_view name, FrontendOptions::LoadFormat* out) {
  if (name == "sglang") {
    *out = FrontendOptions::LoadFormat::kSglang;
  } else if (name == "vllm-router") {
    *out = FrontendOptions::LoadFormat::kVllmRouter;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "get-load-format must be sglang or vllm-router, got '", std::string(name), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Frontend>> Frontend::Create(Backend* backend, ServedModel model,
                                                           FrontendOptions options) {
  std::vector<ServedModel> models;
  models.push_back(std::move(model));
  return Create(backend, std::move(models), std::move(options));
}

absl::StatusOr<std::unique_ptr<Frontend>> Frontend::Create(Backend* backend,
                                                           std::vector<ServedModel> models,
                                                           FrontendOptions options) {
  if (backend == nullptr) return absl::InvalidArgumentError("Frontend: backend is null");
  if (models.empty()) return absl::InvalidArgumentError("Frontend: no model to serve");
  absl::flat_hash_set<std::string> names;
  for (const ServedModel& model : models) {
    if (model.tokenizer == nullptr) {
      return absl::InvalidArgumentError("Frontend: tokenizer is null");
    }
    if (model.max_model_len <= 0 || model.vocab_size <= 0) {
      return absl::InvalidArgumentError("Frontend: max_model_len and vocab_size must be > 0");
    }
    if (!names.insert(model.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Frontend: model ", model.name, " is served twice"));
    }
  }
  if (options.api_key_cache_salts.size() > options.api_keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Frontend: ", options.api_key_cache_salts.size(),
                                                   " API key cache salts for ",
                                                   options.api_keys.size(), " API keys"));
  }
  for (const std::string& salt : options.api_key_cache_salts) {
    if (salt.size() > SamplingParams::kMaxCacheSaltBytes) {
      return absl::InvalidArgumentError(absl::StrCat("Frontend: an API key cache salt is over ",
                                                     SamplingParams::kMaxCacheSaltBytes, " bytes"));
    }
  }
  return std::unique_ptr<Frontend>(
      new Frontend(backend, std::move(models), std::move(options)));
}

class Frontend::RefundingObserver final : public RequestObserver {
 public:
  RefundingObserver(RateLimiter* limiter, RequestObserver* next)
      : limiter_(limiter), next_(next) {}
  void OnFinished(const RequestRecord& record) override {
    if (record.rate_charged_output_tokens > 0) {
      int key_index = -1;
      absl::string_view id = record.api_key_id;
      if (absl::ConsumePrefix(&id, "key-") && !absl::SimpleAtoi(id, &key_index)) key_index = -1;
      limiter_->Refund(key_index, record.rate_charged_output_tokens -
                                      std::min(record.completion_tokens,
                                               record.rate_charged_output_tokens));
    }
    if (next_ != nullptr) next_->OnFinished(record);
  }

 private:
  RateLimiter* limiter_;
  RequestObserver* next_;
};

Frontend::Frontend(Backend* backend, std::vector<ServedModel> models, FrontendOptions options)
    : backend_(backend),
      options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())),
      rate_limiter_(options_.rate_limit, options_.api_key_rate_limits),
      observer_(std::make_unique<RefundingObserver>(&rate_limiter_, options_.observer)) {
  if (options_.request_threads > 0) {
    pool_ = std::make_unique<internal::RequestPool>(
        options_.request_threads, std::max<size_t>(1, options_.max_queued_requests));
  }
  if (options_.max_memory_bytes > 0) {
    memory_watch_ =
        std::make_unique<MemoryWatch>(options_.max_memory_bytes, options_.memory_sample_interval);
  }
  for (ServedModel& served : models) {
    Model m;
    m.tool_parser = options_.tool_call_parser;
    if (m.tool_parser == ToolCallParser::kAuto) {
      m.tool_parser = served.chat_template != nullptr
                          ? DetectToolCallParser(served.chat_template->source())
                          : ToolCallParser::kNone;
    }
    m.served = std::move(served);
    models_.push_back(std::move(m));
  }
}

const Frontend::Model* Frontend::FindModel(std::string_view name) const {
  for (const Model& m : models_) {
    if (m.served.name == name) return &m;
  }
  return nullptr;
}

std::optional<ApiError> Frontend::ModelForTokenize(const std::string& name,
                                                   const Model** model) const {
  if (name.empty() && models_.size() > 1) {
    return ApiError::BadRequest(
        absl::StrCat("this server serves ", models_.size(), " models: name one in `model`"),
        "model");
  }
  *model = name.empty() ? &models_.front() : FindModel(name);
  if (*model == nullptr) return ApiError::ModelNotFound(name);
  return std::nullopt;
}

Frontend::~Frontend() = default;

std::optional<ApiError> Frontend::ChargeRateLimit(int key_index, internal::JobSpec* spec) {
  if (rate_limiter_.unlimited()) return std::nullopt;
  int64_t output = 0, tokens = 0;
  for (size_t i = 0; i < spec->prompts.size(); ++i) {
    output += int64_t(spec->n) * std::max(0, spec->max_tokens[i]);
    tokens += int64_t(spec->n) * int64_t(spec->prompts[i].size());
  }
  tokens += output;
  const RateLimiter::Decision d = rate_limiter_.Admit(key_index, tokens);
  if (d.admitted) {
    spec->rate_charged_output_tokens = output;
    return std::nullopt;
  }
  ApiError e;
  e.http_status = 429;
  e.type = "rate_limit_error";
  e.code = "rate_limit_exceeded";
  if (d.exceeds_allowance) {
    e.message = absl::StrCat("Rate limit: ", d.reason, ".");
  } else {
    e.retry_after_s = std::max(1, int(std::ceil(d.retry_after_s)));
    e.message = absl::StrCat("Rate limit reached for ", d.reason, ": retry after ",
                             e.retry_after_s, " s.");
  }
  return e;
}

void Frontend::Install(http::Server& server) {
  auto bind = [this](void (Frontend::*method)(const http::Request&,
                                              std::shared_ptr<http::ResponseWriter>)) {
    return [this, method](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
      (this->*method)(r, std::move(w));
    };
  };
  // The requests that parse, render and tokenize run on the request threads. A generation
  // request (`sheddable`) that arrives while the process is over its memory limit is answered
  // on the I/O thread instead: its handler refuses it before reading the body, and nothing is
  // copied or queued for it.
  auto offload = [this](void (Frontend::*method)(const http::Request&,
                                                 std::shared_ptr<http::ResponseWriter>),
                        bool sheddable = false) {
    return [this, method, sheddable](const http::Request& r,
                                     std::shared_ptr<http::ResponseWriter> w) {
      const bool shed = sheddable && memory_watch_ != nullptr && memory_watch_->over_limit();
      if (pool_ == nullptr || shed) return (this->*method)(r, std::move(w));
      auto request = std::make_shared<const http::Request>(r);
      internal::RequestPool::Task task;
      task.run = [this, method, request, w] { (this->*method)(*request, w); };
      task.dropped = [w] {
        ApiError e;
        e.http_status = 503;
        e.type = "server_error";
        e.message = "The server is shutting down.";
        internal::RespondApiError(*w, e);
      };
      if (!pool_->Submit(std::move(task))) {
        ApiError e;
        e.http_status = 503;
        e.type = "server_error";
        e.message = absl::StrCat("The server is busy: ", options_.max_queued_requests,
                                 " requests wait to be read. Retry shortly.");
        e.retry_after_s = 1;
        internal::RespondApiError(*w, e);
      }
    };
  };
  server.Route("POST", "/v1/completions", offload(&Frontend::HandleCompletions, true));
  server.Route("POST", "/v1/chat/completions", offload(&Frontend::HandleChatCompletions, true));
  server.Route("GET", "/v1/models", bind(&Frontend::HandleModels));
  for (const Model& m : models_) {
    server.Route("GET", absl::StrCat("/v1/models/", m.served.name),
                 [this, &m](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
                   HandleModel(m, r, std::move(w));
                 });
  }
  server.Route("GET", "/health", bind(&Frontend::HandleHealth));
  server.Route("GET", "/ready", bind(&Frontend::HandleReady));
  server.Route("GET", "/health_generate", bind(&Frontend::HandleHealthGenerate));
  server.Route("GET", "/server_info", bind(&Frontend::HandleServerInfo));
  server.Route("GET", "/get_server_info", bind(&Frontend::HandleServerInfo));
  server.Route("GET", "/model_info", bind(&Frontend::HandleModelInfo));
  server.Route("GET", "/get_model_info", bind(&Frontend::HandleModelInfo));
  server.Route("GET", "/get_load", bind(&Frontend::HandleGetLoad));
  server.Route("POST", "/tokenize", offload(&Frontend::HandleTokenize));
  server.Route("POST", "/detokenize", offload(&Frontend::HandleDetokenize));
}

void Frontend::NoteUnknownParams(const std::vector<std::string>& names) {
  if (names.empty() || options_.unknown_params != UnknownParams::kWarn) return;
  std::vector<std::string> fresh;
  bool full = false;
  {
    absl::MutexLock lock(&unknown_mu_);
    for (const std::string& name : names) {
      if (unknown_logged_.contains(name)) continue;
      if (unknown_logged_.size() >= kMaxUnknownNamesLogged) {
        full = true;
        break;
      }
      unknown_logged_.insert(name);
      fresh.push_back(name);
      if (unknown_logged_.size() == kMaxUnknownNamesLogged) full = true;
    }
  }
  if (fresh.empty()) return;
  STRATA_LOG(Warning) << "served requests without the unrecognized parameter(s) "
                      << absl::StrJoin(fresh, ", ")
                      << " (--unknown-params warn; each name is logged once"
                      << (full ? "; no further names will be logged" : "") << ")";
}

std::optional<ApiError> Frontend::Authorize(const http::Request& request, std::string* key_id,
                                            int* key_index) const {
  if (key_index != nullptr) *key_index = -1;
  if (options_.api_keys.empty()) return std::nullopt;
  const std::string auth = HeaderValue(request, "authorization");
  constexpr absl::string_view kBearer = "Bearer ";
  if (absl::StartsWithIgnoreCase(auth, kBearer)) {
    const std::string key = auth.substr(kBearer.size());
    for (size_t i = 0; i < options_.api_keys.size(); ++i) {
      if (options_.api_keys[i] == key) {
        *key_id = absl::StrCat("key-", i);
        if (key_index != nullptr) *key_index = static_cast<int>(i);
        return std::nullopt;
      }
    }
  }
  ApiError e;
  e.http_status = 401;
  e.message = auth.empty() ? "Missing API key: send `Authorization: Bearer <key>`."
                           : "Incorrect API key provided.";
  e.code = "invalid_api_key";
  return e;
}

void Frontend::ApplyKeyCacheSalt(int key_index, SamplingParams* params) const {
  if (!params->cache_salt.empty() || key_index < 0 ||
      key_index >= static_cast<int>(options_.api_key_cache_salts.size())) {
    return;
  }
  params->cache_salt = options_.api_key_cache_salts[key_index];
}

JobSpec Frontend::NewSpec(const http::Request& request, bool chat) const {
  JobSpec spec;
  spec.endpoint = chat ? Endpoint::kChat : Endpoint::kCompletions;
  spec.arrival = absl::Now();
  spec.meta.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", RandomHex());
  spec.meta.created = absl::ToUnixSeconds(spec.arrival);
  spec.slo_class = HeaderValue(request, "x-slo-class");
  spec.hide_cached_tokens = options_.hide_cached_tokens;
  return spec;
}

std::optional<ApiError> Frontend::ShedForMemory() const {
  if (memory_watch_ == nullptr || !memory_watch_->over_limit()) return std::nullopt;
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.code = "memory_limit";
  e.message = absl::StrCat("The server is out of memory for new requests (",
                           memory_watch_->resident_bytes() >> 20, " MiB resident, limit ",
                           memory_watch_->limit_bytes() >> 20, " MiB). Retry shortly.");
  e.retry_after_s = 1;
  return e;
}

void Frontend::Reject(const ApiError& error, const JobSpec& spec, http::ResponseWriter& writer,
                      std::string shed_reason) const {
  internal::RespondApiError(writer, error);
  if (options_.observer == nullptr) return;
  RequestRecord record = internal::RecordFor(spec);
  record.shed_reason = std::move(shed_reason);
  record.http_status = error.http_status;
  record.failed = true;
  record.e2e = absl::Now() - spec.arrival;
  options_.observer->OnFinished(record);
}

std::optional<ApiError> Frontend::PrepareCompletion(const Model& m,
                                                    const CompletionRequest& request,
                                                    JobSpec* spec) const {
  const ServedModel& model = m.served;
  for (const PromptInput& p : request.prompts) {
    if (!p.is_tokens) {
      // Like HF's default and vLLM: the tokenizer's special tokens (e.g. BOS) are added unless
      // the request says add_special_tokens=false.
      spec->prompts.push_back(
          model.tokenizer->Encode(p.text, request.common.add_special_tokens.value_or(true)));
      if (spec->prompts.back().empty()) {
        return ApiError::BadRequest("prompt must not be empty", "prompt");
      }
    } else {
      for (int32_t t : p.tokens) {
        if (t >= model.vocab_size) {
          return ApiError::BadRequest(
              absl::StrCat("prompt token id ", t, " is out of range [0, ", model.vocab_size, ")"),
              "prompt");
        }
      }
      spec->prompts.push_back(p.tokens);
    }
    // echo repeats a text prompt as sent and token ids as their text (special tokens kept).
    if (request.echo) {
      spec->echo.push_back(p.is_tokens ? model.tokenizer->Decode(p.tokens,
                                                                 /*skip_special_tokens=*/false)
                                       : p.text);
    }
  }
  return std::nullopt;
}

std::optional<ApiError> Frontend::PrepareChat(const Model& m, const ChatRequest& request,
                                              JobSpec* spec) const {
  const ServedModel& model = m.served;
  if (model.chat_template == nullptr) {
    return ApiError::BadRequest(absl::StrCat("model ", model.name, " has no chat template"),
                                "messages");
  }
  if (request.tools.active()) {
    if (m.tool_parser == ToolCallParser::kNone) {
      return ApiError::BadRequest(
          absl::StrCat("tools need a tool-call parser, and this server has none for model ",
                       model.name,
                       " (its chat template shows no known tool-call format): start it with "
                       "--tool-call-parser llama3_json, hermes or mistral, or send "
                       "tool_choice \"none\""),
          "tools");
    }
    spec->tool_parser = m.tool_parser;
    spec->parallel_tool_calls = request.tools.parallel_tool_calls;
    // [TOOL_CALLS] is a special token: decoding must keep it for the parser to see it.
    if (m.tool_parser == ToolCallParser::kMistral) spec->params.skip_special_tokens = false;
    if (request.tools.choice == ToolChoice::kRequired ||
        request.tools.choice == ToolChoice::kFunction) {
      if (spec->params.guided.active()) {
        return ApiError::BadRequest(
            "tool_choice \"required\" or a named function constrains the output to tool calls "
            "and cannot be combined with response_format or another output constraint",
            "tool_choice");
      }
      auto guided = ToolCallConstraint(request.tools, m.tool_parser);
      if (!guided.ok()) {
        return ApiError::BadRequest(
            absl::StrCat("tools: the functions' parameters cannot constrain the output: ",
                         guided.status().message()),
            "tools");
      }
      spec->params.guided = *std::move(guided);
    }
  }
  absl::StatusOr<std::string> prompt =
      RenderChat(*model.chat_template, request.messages, request.add_generation_prompt,
                 request.continue_final_message, request.chat_template_kwargs, request.tools);
  if (!prompt.ok()) {
    return ApiError::BadRequest(std::string(prompt.status().message()), "messages");
  }
  // The template already wrote BOS and the like: HF apply_chat_template(tokenize=True) does
  // not add special tokens again (vLLM's add_special_tokens=true asks for it).
  spec->prompts.push_back(
      model.tokenizer->Encode(*prompt, request.common.add_special_tokens.value_or(false)));
  if (spec->prompts.back().empty()) {
    return ApiError::BadRequest("the rendered chat prompt is empty", "messages");
  }
  return std::nullopt;
}

std::optional<ApiError> Frontend::ResolveLimits(const Model& m, int default_max_tokens,
                                                JobSpec* spec) const {
  const int64_t context = m.served.max_model_len;
  const int64_t max_prompt = options_.max_prompt_tokens > 0
                                 ? std::min(options_.max_prompt_tokens, context - 1)
                                 : context - 1;
  const int requested = spec->params.max_tokens;
  for (const std::vector<int32_t>& prompt : spec->prompts) {
    const int64_t len = static_cast<int64_t>(prompt.size());
    if (len > max_prompt) {
      return ApiError::PromptTooLong(absl::StrCat("This model's maximum context length is ",
                                                  context, " tokens and prompts may hold at most ",
                                                  max_prompt, " tokens. However, your prompt has ",
                                                  len, " tokens."));
    }
    // The output is clipped to the rest of the context window (finish_reason "length").
    if (requested >= 0 && spec->params.min_tokens > requested) {
      return ApiError::BadRequest(absl::StrCat("min_tokens (", spec->params.min_tokens,
                                               ") must be <= max_tokens (", requested, ")"),
                                  "min_tokens");
    }
    int64_t max_tokens = requested >= 0 ? requested : default_max_tokens;
    if (max_tokens < 0) max_tokens = context - len;
    spec->max_tokens.push_back(static_cast<int>(std::min(max_tokens, context - len)));
  }
  SamplingParams check = spec->params;
  check.max_tokens = spec->max_tokens.empty() ? 0 : spec->max_tokens.front();
  if (absl::Status s = check.Validate(m.served.vocab_size); !s.ok()) return SamplingError(s);
  return std::nullopt;
}

void Frontend::HandleCompletions(const http::Request& request,
                                 std::shared_ptr<http::ResponseWriter> writer) {
  JobSpec spec = NewSpec(request, /*chat=*/false);
  CompletionRequest parsed;
  int key_index = -1;
  std::optional<ApiError> error = Authorize(request, &spec.api_key_id, &key_index);
  // Refused before the body is parsed: parsing and tokenizing take memory.
  if (!error) {
    if (auto shed = ShedForMemory()) return Reject(*shed, spec, *writer, "memory");
  }
  if (!error) error = ParseCompletionRequest(request.body, &parsed, parse_options());
  const Model* m = error ? nullptr : FindModel(parsed.common.model);
  if (!error && m == nullptr) error = ApiError::ModelNotFound(parsed.common.model);
  spec.meta.model = m != nullptr ? m->served.name : parsed.common.model;
  spec.params = parsed.common.sampling;
  spec.unknown_params = parsed.common.unknown_params;
  ApplyKeyCacheSalt(key_index, &spec.params);
  if (!error) error = PrepareCompletion(*m, parsed, &spec);
  if (!error) error = ResolveLimits(*m, /*default_max_tokens=*/16, &spec);
  spec.n = parsed.common.n;
  spec.stream = parsed.common.stream;
  spec.include_usage = parsed.common.include_usage;
  spec.logprobs = spec.params.logprobs >= 0;
  if (!error) error = internal::ApplyResumeHeaders(request, *backend_, &spec);
  // Last: nothing is charged to the key for a request refused for another reason.
  if (!error) error = ChargeRateLimit(key_index, &spec);
  if (error) return Reject(*error, spec, *writer);
  NoteUnknownParams(spec.unknown_params);
  internal::StartJob(std::move(spec), {backend_, m->served.tokenizer, observer_.get()},
                     std::move(writer));
}

void Frontend::HandleChatCompletions(const http::Request& request,
                                     std::shared_ptr<http::ResponseWriter> writer) {
  JobSpec spec = NewSpec(request, /*chat=*/true);
  ChatRequest parsed;
  int key_index = -1;
  std::optional<ApiError> error = Authorize(request, &spec.api_key_id, &key_index);
  // Refused before the body is parsed: parsing and tokenizing take memory.
  if (!error) {
    if (auto shed = ShedForMemory()) return Reject(*shed, spec, *writer, "memory");
  }
  if (!error) error = ParseChatRequest(request.body, &parsed, parse_options());
  const Model* m = error ? nullptr : FindModel(parsed.common.model);
  if (!error && m == nullptr) error = ApiError::ModelNotFound(parsed.common.model);
  spec.meta.model = m != nullptr ? m->served.name : parsed.common.model;
  spec.params = parsed.common.sampling;
  spec.unknown_params = parsed.common.unknown_params;
  ApplyKeyCacheSalt(key_index, &spec.params);
  if (!error) error = PrepareChat(*m, parsed, &spec);
  // Chat's default max_tokens: the rest of the context window (-1).
  if (!error) error = ResolveLimits(*m, /*default_max_tokens=*/-1, &spec);
  spec.n = parsed.common.n;
  spec.stream = parsed.common.stream;
  spec.include_usage = parsed.common.include_usage;
  spec.logprobs = parsed.logprobs;
  if (!error) error = internal::ApplyResumeHeaders(request, *backend_, &spec);
  // Last: nothing is charged to the key for a request refused for another reason.
  if (!error) error = ChargeRateLimit(key_index, &spec);
  if (error) return Reject(*error, spec, *writer);
  NoteUnknownParams(spec.unknown_params);
  internal::StartJob(std::move(spec), {backend_, m->served.tokenizer, observer_.get()},
                     std::move(writer));
}

void Frontend::HandleModels(const http::Request& request,
                            std::shared_ptr<http::ResponseWriter> writer) {
  std::string key_id;
  if (std::optional<ApiError> error = Authorize(request, &key_id)) {
    return internal::RespondApiError(*writer, *error);
  }
  OrderedJson data = OrderedJson::array();
  for (const Model& m : models_) data.push_back(ModelObject(m.served, created_));
  OrderedJson body = OrderedJson::object();
  body["object"] = "list";
  body["data"] = std::move(data);
  RespondJson(*writer, 200, body);
}

void Frontend::HandleModel(const Model& m, const http::Request& request,
                           std::shared_ptr<http::ResponseWriter> writer) {
  std::string key_id;
  if (std::optional<ApiError> error = Authorize(request, &key_id)) {
    return internal::RespondApiError(*writer, *error);
  }
  RespondJson(*writer, 200, ModelObject(m.served, created_));
}

void Frontend::HandleHealth(const http::Request& request,
                            std::shared_ptr<http::ResponseWriter> writer) {
  if (auto problem = backend_->Problem()) {
    RespondJson(
        *writer, 503,
        {{"status", problem->status}, {"reason", problem->reason}, {"seconds", problem->seconds}});
    return;
  }
  RespondJson(*writer, 200, {{"status", "ok"}});
}

void Frontend::HandleReady(const http::Request& request,
                           std::shared_ptr<http::ResponseWriter> writer) {
  if (auto problem = backend_->Problem()) {
    RespondJson(
        *writer, 503,
        {{"status", problem->status}, {"reason", problem->reason}, {"seconds", problem->seconds}});
    return;
  }
  const bool ready = backend_->Ready();
  RespondJson(*writer, ready ? 200 : 503, {{"status", ready ? "ready" : "not ready"}});
}

namespace {

// One generation whose outcome answers GET /health_generate: 200 once it finishes, 503 on
// failure. The handle lives until the backend drops the callback (after the last event).
struct HealthProbe {
  std::shared_ptr<http::ResponseWriter> writer;
  std::unique_ptr<GenerationHandle> handle;
  std::atomic<bool> answered{false};

  void Answer(int status, std::string_view text) {
    if (answered.exchange(true)) return;
    writer->Respond(status, "application/json", DumpJson({{"status", std::string(text)}}));
  }
};

}  // namespace

void Frontend::HandleHealthGenerate(const http::Request& request,
                                    std::shared_ptr<http::ResponseWriter> writer) {
  const ServedModel& model = models_.front().served;
  if (!backend_->Ready()) {
    return RespondJson(*writer, 503, {{"status", "not ready"}});
  }
  auto probe = std::make_shared<HealthProbe>();
  probe->writer = std::move(writer);
  GenerateRequest g;
  g.request_id = absl::StrCat("health-", RandomHex());
  g.model = model.name;
  g.prompt = model.tokenizer->Encode("ping", /*add_special_tokens=*/true);
  if (g.prompt.empty()) g.prompt.push_back(0);
  g.params.max_tokens = 1;
  g.params.temperature = 0.0f;
  g.params.ignore_eos = true;
  auto on_event = [probe](GenerateEvent event) {
    if (!event.status.ok()) {
      probe->Answer(503, absl::StrCat("generation failed: ", event.status.message()));
    } else if (event.finished) {
      probe->Answer(200, "ok");
    }
  };
  std::unique_ptr<GenerationHandle> handle = backend_->Generate(std::move(g), on_event);
  probe->handle = std::move(handle);
}

void Frontend::HandleServerInfo(const http::Request& request,
                                std::shared_ptr<http::ResponseWriter> writer) {
  const ServedModel& model = models_.front().served;
  const std::string path = model.model_path.empty() ? model.name : model.model_path;
  const BackendLoad load = backend_->Load();
  OrderedJson body = OrderedJson::object();
  body["model_path"] = path;
  body["tokenizer_path"] = path;
  body["served_model_name"] = model.name;
  body["context_length"] = model.max_model_len;
  body["max_model_len"] = model.max_model_len;
  body["vocab_size"] = model.vocab_size;
  if (load.kv_capacity_tokens > 0) body["max_total_num_tokens"] = load.kv_capacity_tokens;
  body["dp_size"] = 1;
  body["is_generation"] = true;
  body["engine"] = "strata";
  if (!model.device.empty()) body["device"] = model.device;
  RespondJson(*writer, 200, body);
}

void Frontend::HandleModelInfo(const http::Request& request,
                               std::shared_ptr<http::ResponseWriter> writer) {
  const ServedModel& model = models_.front().served;
  const std::string path = model.model_path.empty() ? model.name : model.model_path;
  OrderedJson body = OrderedJson::object();
  body["model_path"] = path;
  body["tokenizer_path"] = path;
  body["served_model_name"] = model.name;
  body["is_generation"] = true;
  RespondJson(*writer, 200, body);
}

void Frontend::HandleGetLoad(const http::Request& request,
                             std::shared_ptr<http::ResponseWriter> writer) {
  const BackendLoad load = backend_->Load();
  if (options_.get_load_format == FrontendOptions::LoadFormat::kVllmRouter) {
    OrderedJson body = OrderedJson::object();
    body["load"] = load.running + load.waiting;
    body["num_reqs"] = load.running;
    body["num_waiting_reqs"] = load.waiting;
    body["num_tokens"] = load.tokens;
    return RespondJson(*writer, 200, body);
  }
  OrderedJson rank = OrderedJson::object();
  rank["dp_rank"] = 0;
  rank["num_reqs"] = load.running;
  rank["num_waiting_reqs"] = load.waiting;
  rank["num_tokens"] = load.tokens;
  RespondJson(*writer, 200, OrderedJson::array({std::move(rank)}));
}

void Frontend::HandleTokenize(const http::Request& request,
                              std::shared_ptr<http::ResponseWriter> writer) {
  std::string key_id;
  TokenizeRequest parsed;
  std::optional<ApiError> error = Authorize(request, &key_id);
  if (!error) error = ParseTokenizeRequest(request.body, &parsed);
  const Model* m = nullptr;
  if (!error) error = ModelForTokenize(parsed.model, &m);
  std::string text = parsed.prompt;
  if (!error && parsed.chat) {
    if (m->served.chat_template == nullptr) {
      error = ApiError::BadRequest(absl::StrCat("model ", m->served.name, " has no chat template"),
                                   "messages");
    } else {
      absl::StatusOr<std::string> rendered =
          RenderChat(*m->served.chat_template, parsed.messages, parsed.add_generation_prompt,
                     parsed.continue_final_message, parsed.chat_template_kwargs, parsed.tools);
      if (rendered.ok()) {
        text = std::move(*rendered);
      } else {
        error = ApiError::BadRequest(std::string(rendered.status().message()), "messages");
      }
    }
  }
  if (error) return internal::RespondApiError(*writer, *error);
  // The defaults of the endpoint the request stands for: special tokens for a prompt, none
  // more for a rendered chat (its template wrote them).
  const std::vector<int32_t> ids =
      m->served.tokenizer->Encode(text, parsed.add_special_tokens.value_or(!parsed.chat));
  OrderedJson body = OrderedJson::object();
  body["count"] = ids.size();
  body["max_model_len"] = m->served.max_model_len;
  body["tokens"] = ids;
  body["token_strs"] = nullptr;
  RespondJson(*writer, 200, body);
}

void Frontend::HandleDetokenize(const http::Request& request,
                                std::shared_ptr<http::ResponseWriter> writer) {
  std::string key_id;
  DetokenizeRequest parsed;
  std::optional<ApiError> error = Authorize(request, &key_id);
  if (!error) error = ParseDetokenizeRequest(request.body, &parsed);
  const Model* m = nullptr;
  if (!error) error = ModelForTokenize(parsed.model, &m);
  if (!error) {
    for (int32_t t : parsed.tokens) {
      if (t >= m->served.vocab_size) {
        error = ApiError::BadRequest(
            absl::StrCat("token id ", t, " is out of range [0, ", m->served.vocab_size, ")"),
            "tokens");
        break;
      }
    }
  }
  if (error) return internal::RespondApiError(*writer, *error);
  OrderedJson body = OrderedJson::object();
  body["prompt"] = m->served.tokenizer->Decode(parsed.tokens, /*skip_special_tokens=*/false);
  RespondJson(*writer, 200, body);
}

}  // namespace strata::openai
