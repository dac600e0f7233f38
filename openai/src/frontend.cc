#include "strata/openai/frontend.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/generation_job.h"
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
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

void RespondJson(http::ResponseWriter& writer, int status, const OrderedJson& body) {
  writer.Respond(status, "application/json", DumpJson(body));
}

// SamplingParams::Validate messages start with the parameter's name.
ApiError SamplingError(const absl::Status& status) {
  std::string message(status.message());
  std::string param = message.substr(0, message.find_first_of(" :"));
  return ApiError::BadRequest(std::move(message), std::move(param));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Frontend>> Frontend::Create(Backend* backend, ServedModel model,
                                                           FrontendOptions options) {
  if (backend == nullptr) return absl::InvalidArgumentError("Frontend: backend is null");
  if (model.tokenizer == nullptr) return absl::InvalidArgumentError("Frontend: tokenizer is null");
  if (model.max_model_len <= 0 || model.vocab_size <= 0) {
    return absl::InvalidArgumentError("Frontend: max_model_len and vocab_size must be > 0");
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
      new Frontend(backend, std::move(model), std::move(options)));
}

Frontend::Frontend(Backend* backend, ServedModel model, FrontendOptions options)
    : backend_(backend),
      model_(std::move(model)),
      options_(std::move(options)),
      created_(absl::ToUnixSeconds(absl::Now())) {}

void Frontend::Install(http::Server& server) {
  auto bind = [this](void (Frontend::*method)(const http::Request&,
                                              std::shared_ptr<http::ResponseWriter>)) {
    return [this, method](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
      (this->*method)(r, std::move(w));
    };
  };
  server.Route("POST", "/v1/completions", bind(&Frontend::HandleCompletions));
  server.Route("POST", "/v1/chat/completions", bind(&Frontend::HandleChatCompletions));
  server.Route("GET", "/v1/models", bind(&Frontend::HandleModels));
  server.Route("GET", "/health", bind(&Frontend::HandleHealth));
  server.Route("GET", "/ready", bind(&Frontend::HandleReady));
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
  spec.meta.model = model_.name;
  spec.slo_class = HeaderValue(request, "x-slo-class");
  spec.hide_cached_tokens = options_.hide_cached_tokens;
  return spec;
}

void Frontend::Reject(const ApiError& error, const JobSpec& spec,
                      http::ResponseWriter& writer) const {
  internal::RespondApiError(writer, error);
  if (options_.observer == nullptr) return;
  RequestRecord record = internal::RecordFor(spec);
  record.http_status = error.http_status;
  record.failed = true;
  record.e2e = absl::Now() - spec.arrival;
  options_.observer->OnFinished(record);
}

std::optional<ApiError> Frontend::PrepareCompletion(const CompletionRequest& request,
                                                    JobSpec* spec) const {
  for (const PromptInput& p : request.prompts) {
    if (!p.is_tokens) {
      // Like HF's default and vLLM: the tokenizer's special tokens (e.g. BOS) are added.
      spec->prompts.push_back(model_.tokenizer->Encode(p.text, /*add_special_tokens=*/true));
      if (spec->prompts.back().empty()) {
        return ApiError::BadRequest("prompt must not be empty", "prompt");
      }
      continue;
    }
    for (int32_t t : p.tokens) {
      if (t >= model_.vocab_size) {
        return ApiError::BadRequest(
            absl::StrCat("prompt token id ", t, " is out of range [0, ", model_.vocab_size, ")"),
            "prompt");
      }
    }
    spec->prompts.push_back(p.tokens);
  }
  return std::nullopt;
}

std::optional<ApiError> Frontend::PrepareChat(const ChatRequest& request, JobSpec* spec) const {
  if (model_.chat_template == nullptr) {
    return ApiError::BadRequest(absl::StrCat("model ", model_.name, " has no chat template"),
                                "messages");
  }
  absl::StatusOr<std::string> prompt = model_.chat_template->Render(
      request.messages, /*add_generation_prompt=*/true, request.chat_template_kwargs);
  if (!prompt.ok()) {
    return ApiError::BadRequest(std::string(prompt.status().message()), "messages");
  }
  // The template already wrote BOS and the like: HF apply_chat_template(tokenize=True) does
  // not add special tokens again.
  spec->prompts.push_back(model_.tokenizer->Encode(*prompt, /*add_special_tokens=*/false));
  if (spec->prompts.back().empty()) {
    return ApiError::BadRequest("the rendered chat prompt is empty", "messages");
  }
  return std::nullopt;
}

std::optional<ApiError> Frontend::ResolveLimits(int default_max_tokens, JobSpec* spec) const {
  const int64_t context = model_.max_model_len;
  const int64_t max_prompt = options_.max_prompt_tokens > 0
                                 ? std::min(options_.max_prompt_tokens, context - 1)
                                 : context - 1;
  const int requested = spec->params.max_tokens;
  for (const std::vector<int32_t>& prompt : spec->prompts) {
    const int64_t len = static_cast<int64_t>(prompt.size());
    if (len > max_prompt) {
      return ApiError::PromptTooLong(absl::StrCat(
          "This model's maximum context length is ", context,
          " tokens and prompts may hold at most ", max_prompt, " tokens. However, your prompt has ",
          len, " tokens."));
    }
    // The output is clipped to the rest of the context window (finish_reason "length").
    int64_t max_tokens = requested >= 0 ? requested : default_max_tokens;
    if (max_tokens < 0) max_tokens = context - len;
    spec->max_tokens.push_back(static_cast<int>(std::min(max_tokens, context - len)));
  }
  SamplingParams check = spec->params;
  check.max_tokens = spec->max_tokens.empty() ? 0 : spec->max_tokens.front();
  if (absl::Status s = check.Validate(model_.vocab_size); !s.ok()) return SamplingError(s);
  return std::nullopt;
}

void Frontend::HandleCompletions(const http::Request& request,
                                 std::shared_ptr<http::ResponseWriter> writer) {
  JobSpec spec = NewSpec(request, /*chat=*/false);
  CompletionRequest parsed;
  int key_index = -1;
  std::optional<ApiError> error = Authorize(request, &spec.api_key_id, &key_index);
  if (!error) error = ParseCompletionRequest(request.body, &parsed);
  if (!error && parsed.common.model != model_.name) {
    error = ApiError::ModelNotFound(parsed.common.model);
  }
  spec.params = parsed.common.sampling;
  ApplyKeyCacheSalt(key_index, &spec.params);
  if (!error) error = PrepareCompletion(parsed, &spec);
  if (!error) error = ResolveLimits(/*default_max_tokens=*/16, &spec);
  if (error) return Reject(*error, spec, *writer);
  spec.n = parsed.common.n;
  spec.stream = parsed.common.stream;
  spec.include_usage = parsed.common.include_usage;
  spec.logprobs = spec.params.logprobs >= 0;
  internal::StartJob(std::move(spec), {backend_, model_.tokenizer, options_.observer},
                     std::move(writer));
}

void Frontend::HandleChatCompletions(const http::Request& request,
                                     std::shared_ptr<http::ResponseWriter> writer) {
  JobSpec spec = NewSpec(request, /*chat=*/true);
  ChatRequest parsed;
  int key_index = -1;
  std::optional<ApiError> error = Authorize(request, &spec.api_key_id, &key_index);
  if (!error) error = ParseChatRequest(request.body, &parsed);
  if (!error && parsed.common.model != model_.name) {
    error = ApiError::ModelNotFound(parsed.common.model);
  }
  spec.params = parsed.common.sampling;
  ApplyKeyCacheSalt(key_index, &spec.params);
  if (!error) error = PrepareChat(parsed, &spec);
  // Chat's default max_tokens: the rest of the context window (-1).
  if (!error) error = ResolveLimits(/*default_max_tokens=*/-1, &spec);
  if (error) return Reject(*error, spec, *writer);
  spec.n = parsed.common.n;
  spec.stream = parsed.common.stream;
  spec.include_usage = parsed.common.include_usage;
  spec.logprobs = parsed.logprobs;
  internal::StartJob(std::move(spec), {backend_, model_.tokenizer, options_.observer},
                     std::move(writer));
}

void Frontend::HandleModels(const http::Request& request,
                            std::shared_ptr<http::ResponseWriter> writer) {
  std::string key_id;
  if (std::optional<ApiError> error = Authorize(request, &key_id)) {
    return internal::RespondApiError(*writer, *error);
  }
  OrderedJson model = OrderedJson::object();
  model["id"] = model_.name;
  model["object"] = "model";
  model["created"] = created_;
  model["owned_by"] = "strata";
  model["max_model_len"] = model_.max_model_len;
  model["vocab_size"] = model_.vocab_size;  // token-array prompts must stay below it
  OrderedJson body = OrderedJson::object();
  body["object"] = "list";
  body["data"] = OrderedJson::array({std::move(model)});
  RespondJson(*writer, 200, body);
}

void Frontend::HandleHealth(const http::Request& request,
                            std::shared_ptr<http::ResponseWriter> writer) {
  RespondJson(*writer, 200, {{"status", "ok"}});
}

void Frontend::HandleReady(const http::Request& request,
                           std::shared_ptr<http::ResponseWriter> writer) {
  const bool ready = backend_->Ready();
  RespondJson(*writer, ready ? 200 : 503, {{"status", ready ? "ready" : "not ready"}});
}

}  // namespace strata::openai
