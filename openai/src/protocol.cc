#include "strata/openai/protocol.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/guided_request.h"
#include "src/tool_request.h"
#include "strata/common/json_limits.h"
#include "strata/openai/backend.h"

namespace strata::openai {
namespace {

using Json = nlohmann::json;

#define STRATA_RETURN_IF_API_ERROR(expr)                \
  do {                                                  \
    std::optional<ApiError> strata_api_error_ = (expr); \
    if (strata_api_error_) return strata_api_error_;    \
  } while (0)

constexpr int kMaxN = 128;
constexpr int kMaxLogprobs = 20;
constexpr int kMaxStop = 4;

// Typed access to the known fields of one request object. Every getter leaves *out unchanged
// when the field is absent or null and returns the 400 to send for a wrong type or range.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  const Json* Find(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<ApiError> Float(const char* name, float* out,
                                const std::function<bool(double)>& in_range,
                                std::string_view range) const {
    const Json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) return TypeError(name, "a number");
    const double d = v->get<double>();
    if (!std::isfinite(d) || !in_range(d)) {
      return ApiError::BadRequest(
          absl::StrCat(name, " must be ", std::string(range), ", got ", v->dump()), name);
    }
    *out = static_cast<float>(d);
    return std::nullopt;
  }

  std::optional<ApiError> Int(const char* name, int64_t lo, int64_t hi, int64_t* out) const {
    const Json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) return TypeError(name, "an integer");
    const int64_t i = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : v->get<int64_t>();
    if (i < lo || i > hi) {
      return ApiError::BadRequest(
          absl::StrCat(name, " must be in [", lo, ", ", hi, "], got ", v->dump()), name);
    }
    *out = i;
    return std::nullopt;
  }

  std::optional<ApiError> Int(const char* name, int64_t lo, int64_t hi, int* out) const {
    int64_t value = *out;
    STRATA_RETURN_IF_API_ERROR(Int(name, lo, hi, &value));
    *out = static_cast<int>(value);
    return std::nullopt;
  }

  std::optional<ApiError> Bool(const char* name, bool* out) const {
    const Json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) return TypeError(name, "a boolean");
    *out = v->get<bool>();
    return std::nullopt;
  }

  static ApiError TypeError(std::string_view name, std::string_view type) {
    return ApiError::BadRequest(std::string(name) + " must be " + std::string(type),
                                std::string(name));
  }

 private:
  const Json& object_;
};

// Refuses a body nested deeper than kMaxJsonDepth before anything parses it.
std::optional<ApiError> CheckBodyDepth(std::string_view body) {
  if (absl::Status depth = CheckJsonDepth(body); !depth.ok()) {
    return ApiError::BadRequest(absl::StrCat("request body: ", depth.message()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseBody(std::string_view body, Json* out) {
  STRATA_RETURN_IF_API_ERROR(CheckBodyDepth(body));
  *out = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    return ApiError::BadRequest("request body is not valid JSON");
  }
  if (!out->is_object()) return ApiError::BadRequest("request body must be a JSON object");
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const Fields& f, SamplingParams* p) {
  const Json* v = f.Find("stop");
  if (v == nullptr) return std::nullopt;
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStop) {
      return ApiError::BadRequest(absl::StrCat("stop may hold at most ", kMaxStop, " strings"),
                                  "stop");
    }
    for (const Json& s : *v) {
      if (!s.is_string()) return Fields::TypeError("stop", "a string or an array of strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    return Fields::TypeError("stop", "a string or an array of strings");
  }
  for (const std::string& s : stop) {
    if (s.empty()) return ApiError::BadRequest("stop strings must not be empty", "stop");
  }
  p->stop = std::move(stop);
  return std::nullopt;
}

std::optional<ApiError> ParseStopTokenIds(const Fields& f, SamplingParams* p) {
  const Json* v = f.Find("stop_token_ids");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) return Fields::TypeError("stop_token_ids", "an array of integers");
  for (const Json& t : *v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      return Fields::TypeError("stop_token_ids", "an array of token ids");
    }
    p->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

// OpenAI's logit_bias: an object mapping token ids (as decimal strings) to biases in
// [-100, 100], at most SamplingParams::kMaxLogitBias entries. Ids beyond the vocabulary are
// refused later, where the vocabulary is known (SamplingParams::Validate).
std::optional<ApiError> ParseLogitBias(const Fields& f, SamplingParams* p) {
  const Json* v = f.Find("logit_bias");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) {
    return Fields::TypeError("logit_bias", "an object mapping token ids to numbers");
  }
  if (v->size() > SamplingParams::kMaxLogitBias) {
    return ApiError::BadRequest(
        absl::StrCat("logit_bias may hold at most ", SamplingParams::kMaxLogitBias,
                     " entries, got ", v->size()),
        "logit_bias");
  }
  const double limit = SamplingParams::kMaxLogitBiasValue;
  for (const auto& [key, value] : v->items()) {
    int64_t id = -1;
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return absl::ascii_isdigit(c); });
    if (!digits || !absl::SimpleAtoi(key, &id) || id > INT32_MAX) {
      return ApiError::BadRequest(
          absl::StrCat("logit_bias keys must be token ids (non-negative integers as strings), "
                       "got \"",
                       key.substr(0, 32), "\""),
          "logit_bias");
    }
    if (!value.is_number()) {
      return ApiError::BadRequest(absl::StrCat("logit_bias values must be numbers, got ",
                                               value.dump().substr(0, 32), " for token ", id),
                                  "logit_bias");
    }
    const double bias = value.get<double>();
    if (!std::isfinite(bias) || bias < -limit || bias > limit) {
      return ApiError::BadRequest(absl::StrCat("logit_bias values must be in [-", limit, ", ",
                                               limit, "], got ", value.dump(), " for token ", id),
                                  "logit_bias");
    }
    p->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  // "7" and "007" name one token: the last one given would silently win.
  std::vector<int32_t> ids;
  for (const auto& entry : p->logit_bias) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return ApiError::BadRequest("logit_bias names a token id more than once", "logit_bias");
  }
  return std::nullopt;
}

// vLLM's include_stop_str_in_output and SGLang's no_stop_trim say the same: keep the stop
// string (or stop token's text) at the end of the output. Either one set to true keeps it.
std::optional<ApiError> ParseStopTrim(const Fields& f, SamplingParams* p) {
  bool include = false, no_trim = false;
  STRATA_RETURN_IF_API_ERROR(f.Bool("include_stop_str_in_output", &include));
  STRATA_RETURN_IF_API_ERROR(f.Bool("no_stop_trim", &no_trim));
  p->include_stop_str_in_output = include || no_trim;
  return std::nullopt;
}

// A boolean strata honours only in one of its values: `supported` (or null) passes, the other
// is refused as not supported.
std::optional<ApiError> OnlyBool(const Fields& f, const char* name, bool supported,
                                 std::string_view why) {
  bool value = supported;
  STRATA_RETURN_IF_API_ERROR(f.Bool(name, &value));
  if (value == supported) return std::nullopt;
  return ApiError::BadRequest(
      absl::StrCat(name, "=", value ? "true" : "false", " is not supported: ", std::string(why)),
      name);
}

// vLLM/SGLang fields that strata serves in one form only, and those that only shape output
// strata never produces (no reasoning parser splits the text, so the text stays whole, as it
// does on those servers without one).
std::optional<ApiError> CheckExtensionFields(const Fields& f, const SamplingParams& p) {
  bool spaces = true;
  STRATA_RETURN_IF_API_ERROR(f.Bool("spaces_between_special_tokens", &spaces));
  if (spaces && !p.skip_special_tokens && f.Find("spaces_between_special_tokens") != nullptr) {
    return ApiError::BadRequest(
        "spaces_between_special_tokens=true is not supported with skip_special_tokens=false: "
        "strata decodes as a tokenizer.json (fast) tokenizer does, with no spaces added around "
        "special tokens; send false or leave it out",
        "spaces_between_special_tokens");
  }
  STRATA_RETURN_IF_API_ERROR(
      OnlyBool(f, "return_hidden_states", false, "strata does not return hidden states"));
  STRATA_RETURN_IF_API_ERROR(
      OnlyBool(f, "use_beam_search", false, "strata does not implement beam search"));
  for (const char* name : {"separate_reasoning", "stream_reasoning", "include_reasoning"}) {
    bool ignored = false;
    STRATA_RETURN_IF_API_ERROR(f.Bool(name, &ignored));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseSampling(const Fields& f, SamplingParams* p) {
  auto in = [](double lo, double hi) { return [=](double v) { return v >= lo && v <= hi; }; };
  STRATA_RETURN_IF_API_ERROR(f.Float("temperature", &p->temperature, in(0, 2), "in [0, 2]"));
  STRATA_RETURN_IF_API_ERROR(f.Float(
      "top_p", &p->top_p, [](double v) { return v > 0 && v <= 1; }, "in (0, 1]"));
  STRATA_RETURN_IF_API_ERROR(f.Float("min_p", &p->min_p, in(0, 1), "in [0, 1]"));
  STRATA_RETURN_IF_API_ERROR(
      f.Float("presence_penalty", &p->presence_penalty, in(-2, 2), "in [-2, 2]"));
  STRATA_RETURN_IF_API_ERROR(
      f.Float("frequency_penalty", &p->frequency_penalty, in(-2, 2), "in [-2, 2]"));
  STRATA_RETURN_IF_API_ERROR(f.Float(
      "repetition_penalty", &p->repetition_penalty, [](double v) { return v > 0; }, "> 0"));
  STRATA_RETURN_IF_API_ERROR(f.Int("top_k", -1, INT32_MAX, &p->top_k));
  int64_t seed = 0;
  if (f.Find("seed") != nullptr) {
    STRATA_RETURN_IF_API_ERROR(f.Int("seed", INT64_MIN, INT64_MAX, &seed));
    p->seed = static_cast<uint64_t>(seed);
  }
  STRATA_RETURN_IF_API_ERROR(f.Bool("ignore_eos", &p->ignore_eos));
  STRATA_RETURN_IF_API_ERROR(f.Bool("skip_special_tokens", &p->skip_special_tokens));
  STRATA_RETURN_IF_API_ERROR(f.Int("min_tokens", 0, INT32_MAX, &p->min_tokens));
  STRATA_RETURN_IF_API_ERROR(ParseStop(f, p));
  STRATA_RETURN_IF_API_ERROR(ParseStopTokenIds(f, p));
  STRATA_RETURN_IF_API_ERROR(ParseLogitBias(f, p));
  return ParseStopTrim(f, p);
}

std::optional<ApiError> ParseStreamOptions(const Fields& f, CommonRequest* c) {
  const Json* v = f.Find("stream_options");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) return Fields::TypeError("stream_options", "an object");
  if (!c->stream) {
    return ApiError::BadRequest("stream_options is only allowed when stream is true",
                                "stream_options");
  }
  const Fields options(*v);
  if (auto e = options.Bool("include_usage", &c->include_usage)) {
    e->param = "stream_options.include_usage";
    return e;
  }
  return std::nullopt;
}

// cache_salt (vLLM's name): a non-empty string of at most kMaxCacheSaltBytes bytes.
std::optional<ApiError> ParseCacheSalt(const Fields& f, SamplingParams* p) {
  const Json* v = f.Find("cache_salt");
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return Fields::TypeError("cache_salt", "a string");
  const std::string& salt = v->get_ref<const std::string&>();
  if (salt.empty() || salt.size() > SamplingParams::kMaxCacheSaltBytes) {
    return ApiError::BadRequest(
        absl::StrCat("cache_salt must be a non-empty string of at most ",
                     SamplingParams::kMaxCacheSaltBytes, " bytes, got ", salt.size(), " bytes"),
        "cache_salt");
  }
  p->cache_salt = salt;
  return std::nullopt;
}

// model, n, stream, stream_options and the sampling parameters; max_tokens is left to callers.
std::optional<ApiError> ParseCommon(const Json& body, CommonRequest* c) {
  const Fields f(body);
  const Json* model = f.Find("model");
  if (model == nullptr) return ApiError::BadRequest("model is required", "model");
  if (!model->is_string()) return Fields::TypeError("model", "a string");
  c->model = model->get<std::string>();
  c->sampling.max_tokens = -1;
  STRATA_RETURN_IF_API_ERROR(f.Int("n", 1, kMaxN, &c->n));
  STRATA_RETURN_IF_API_ERROR(f.Bool("stream", &c->stream));
  STRATA_RETURN_IF_API_ERROR(ParseStreamOptions(f, c));
  if (f.Find("add_special_tokens") != nullptr) {
    bool add = false;
    STRATA_RETURN_IF_API_ERROR(f.Bool("add_special_tokens", &add));
    c->add_special_tokens = add;
  }
  // Informational: no effect on generation, but a value of the wrong type is still the
  // client's mistake, as OpenAI answers it.
  for (const char* name : {"user", "service_tier", "guided_decoding_backend"}) {
    const Json* v = f.Find(name);
    if (v != nullptr && !v->is_string()) return Fields::TypeError(name, "a string");
  }
  STRATA_RETURN_IF_API_ERROR(ParseCacheSalt(f, &c->sampling));
  STRATA_RETURN_IF_API_ERROR(ParseSampling(f, &c->sampling));
  return CheckExtensionFields(f, c->sampling);
}

std::optional<ApiError> ParseMaxTokens(const Fields& f, const char* name, SamplingParams* p) {
  const Json* v = f.Find(name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return Fields::TypeError(name, "an integer");
  if (v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() < 0) {
    return ApiError::BadRequest(absl::StrCat(name, " must be >= 0, got ", v->dump()), name);
  }
  const uint64_t value = v->get<uint64_t>();
  p->max_tokens = static_cast<int>(std::min<uint64_t>(value, INT32_MAX));
  return std::nullopt;
}

// ---- /v1/completions -------------------------------------------------------------------

std::optional<ApiError> TokenList(const Json& array, std::vector<int32_t>* out) {
  for (const Json& t : array) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      return ApiError::BadRequest("prompt token ids must be non-negative integers", "prompt");
    }
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (out->empty()) return ApiError::BadRequest("prompt must not be empty", "prompt");
  return std::nullopt;
}

std::optional<ApiError> ParseOnePrompt(const Json& v, PromptInput* p) {
  if (v.is_string()) {
    p->text = v.get<std::string>();
    if (p->text.empty()) return ApiError::BadRequest("prompt must not be empty", "prompt");
    return std::nullopt;
  }
  if (v.is_array()) {
    p->is_tokens = true;
    return TokenList(v, &p->tokens);
  }
  return Fields::TypeError(
      "prompt", "a string, an array of strings, an array of token ids or an array of those");
}

std::optional<ApiError> ParsePrompts(const Fields& f, std::vector<PromptInput>* out) {
  const Json* v = f.Find("prompt");
  if (v == nullptr) return ApiError::BadRequest("prompt is required", "prompt");
  if (v->is_array() && v->empty()) {
    return ApiError::BadRequest("prompt must not be empty", "prompt");
  }
  // An array of strings or of token arrays is a batch; an array of integers is one prompt.
  const bool batch = v->is_array() && ((*v)[0].is_string() || (*v)[0].is_array());
  if (!batch) {
    out->emplace_back();
    return ParseOnePrompt(*v, &out->back());
  }
  for (const Json& item : *v) {
    if (item.type() != (*v)[0].type()) {
      return Fields::TypeError("prompt", "an array of prompts of one kind");
    }
    out->emplace_back();
    STRATA_RETURN_IF_API_ERROR(ParseOnePrompt(item, &out->back()));
  }
  return std::nullopt;
}

// Fields /v1/completions accepts only in their trivial form (see docs/openai_api.md).
std::optional<ApiError> CheckUnsupportedCompletionFields(const Fields& f, int n) {
  if (const Json* suffix = f.Find("suffix")) {
    if (!suffix->is_string()) return Fields::TypeError("suffix", "a string");
    if (!suffix->get<std::string>().empty()) {
      return ApiError::BadRequest("suffix is not supported", "suffix");
    }
  }
  int64_t best_of = n;
  STRATA_RETURN_IF_API_ERROR(f.Int("best_of", 1, kMaxN, &best_of));
  if (best_of != n) {
    return ApiError::BadRequest("best_of must equal n (best-of sampling is not supported)",
                                "best_of");
  }
  return std::nullopt;
}

// ---- /v1/chat/completions --------------------------------------------------------------

std::optional<ApiError> ContentText(const nlohmann::ordered_json& content, std::string* out) {
  if (content.is_null()) return std::nullopt;
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  const ApiError bad = Fields::TypeError(
      "messages", "an array of messages whose content is a string or an array of text parts");
  if (!content.is_array()) return bad;
  std::vector<std::string> parts;
  for (const auto& part : content) {
    if (!part.is_object()) return bad;
    auto type = part.find("type");
    auto text = part.find("text");
    if (type == part.end() || *type != "text") {
      return ApiError::BadRequest("only content parts of type \"text\" are supported", "messages");
    }
    if (text == part.end() || !text->is_string()) return bad;
    parts.push_back(text->get<std::string>());
  }
  *out = absl::StrJoin(parts, "\n");
  return std::nullopt;
}

std::optional<ApiError> NormalizeMessage(const nlohmann::ordered_json& m, size_t index,
                                         nlohmann::ordered_json* out) {
  if (!m.is_object()) return Fields::TypeError("messages", "an array of message objects");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) {
    return ApiError::BadRequest("every message needs a string role", "messages");
  }
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
    return ApiError::BadRequest(absl::StrCat("unsupported message role '", r, "'"), "messages");
  }
  std::string text;
  auto content = m.find("content");
  if (content != m.end()) STRATA_RETURN_IF_API_ERROR(ContentText(*content, &text));
  *out = m;
  (*out)["content"] = text;
  return internal::NormalizeToolMessage(out, index);
}

std::optional<ApiError> ParseMessages(const nlohmann::ordered_json& body,
                                      nlohmann::ordered_json* out) {
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) {
    return ApiError::BadRequest("messages is required", "messages");
  }
  if (!messages->is_array()) return Fields::TypeError("messages", "an array");
  if (messages->empty()) return ApiError::BadRequest("messages must not be empty", "messages");
  *out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    nlohmann::ordered_json normalized;
    STRATA_RETURN_IF_API_ERROR(NormalizeMessage((*messages)[i], i, &normalized));
    out->push_back(std::move(normalized));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseChatLogprobs(const Fields& f, ChatRequest* out) {
  STRATA_RETURN_IF_API_ERROR(f.Bool("logprobs", &out->logprobs));
  int top = -1;
  STRATA_RETURN_IF_API_ERROR(f.Int("top_logprobs", 0, kMaxLogprobs, &top));
  if (top >= 0 && !out->logprobs) {
    return ApiError::BadRequest("top_logprobs requires logprobs to be true", "top_logprobs");
  }
  out->common.sampling.logprobs = out->logprobs ? std::max(top, 0) : -1;
  return std::nullopt;
}

// vLLM's add_generation_prompt and continue_final_message: at most one of them true, and a
// continued final message must be the assistant's, with content to continue.
std::optional<ApiError> ParseContinuation(const Fields& f, const nlohmann::ordered_json& messages,
                                          bool* add_generation_prompt,
                                          bool* continue_final_message) {
  STRATA_RETURN_IF_API_ERROR(f.Bool("add_generation_prompt", add_generation_prompt));
  STRATA_RETURN_IF_API_ERROR(f.Bool("continue_final_message", continue_final_message));
  if (!*continue_final_message) return std::nullopt;
  if (*add_generation_prompt) {
    return ApiError::BadRequest(
        "continue_final_message and add_generation_prompt cannot both be true (send "
        "add_generation_prompt: false)",
        "continue_final_message");
  }
  const auto& last = messages.back();
  if (last["role"] != "assistant" ||
      absl::StripAsciiWhitespace(last["content"].get<std::string>()).empty()) {
    return ApiError::BadRequest(
        "continue_final_message needs a final assistant message with content to continue",
        "messages");
  }
  return std::nullopt;
}

}  // namespace

ApiError ApiError::BadRequest(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError ApiError::ModelNotFound(std::string_view model) {
  ApiError e;
  e.http_status = 404;
  e.message = "The model `" + std::string(model) + "` does not exist.";
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

ApiError ApiError::PromptTooLong(std::string message) {
  ApiError e;
  e.http_status = 413;
  e.message = std::move(message);
  e.param = "prompt";
  e.code = "context_length_exceeded";
  return e;
}

int HttpStatusForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kOutOfRange:
      return 413;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

ApiError ApiErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.http_status = HttpStatusForCode(status.code());
  e.message = std::string(status.message());
  if (e.message.empty()) e.message = absl::StatusCodeToString(status.code());
  if (e.http_status == 429) {
    e.type = "rate_limit_error";
    e.code = "rate_limit_exceeded";
    double seconds = 0;
    if (auto p = status.GetPayload(kRetryAfterPayload);
        p.has_value() && absl::SimpleAtod(std::string(*p), &seconds) && seconds > 0) {
      e.retry_after_s = static_cast<int>(std::ceil(seconds));
    }
  } else if (e.http_status >= 500) {
    e.type = "server_error";
  }
  return e;
}

// Sorts every field of the body: known to both endpoints or to this one (parsed elsewhere),
// a known feature strata does not implement (400 unless null: silently ignoring it would change
// the meaning of the request), or unknown (the UnknownParams policy; names kept in *unknown).
std::optional<ApiError> CheckFieldNames(const Json& body,
                                        std::initializer_list<std::string_view> endpoint_fields,
                                        const ParseOptions& options,
                                        std::vector<std::string>* unknown) {
  static constexpr std::string_view kCommon[] = {
      "model", "n", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "seed",
      "stop", "stop_token_ids", "presence_penalty", "frequency_penalty", "repetition_penalty",
      "ignore_eos", "skip_special_tokens", "max_tokens", "cache_salt", "logit_bias",
      // vLLM and SGLang extensions (parsed in ParseCommon)
      "min_tokens", "include_stop_str_in_output", "no_stop_trim", "add_special_tokens",
      "spaces_between_special_tokens", "return_hidden_states", "use_beam_search",
      "separate_reasoning", "stream_reasoning", "include_reasoning",
      // structured output (parsed in ParseGuidedFields); the backend choice is strata's own
      "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "structured_outputs", "regex", "json_schema", "ebnf", "guided_decoding_backend",
      "guided_whitespace_pattern",
      // informational, no effect on generation
      "user", "store", "metadata", "service_tier", "parallel_tool_calls"};
  static constexpr std::string_view kUnsupported[] = {
      "tools", "tool_choice", "functions", "function_call", "audio",
      "modalities", "prediction", "reasoning_effort", "web_search_options",
      // vLLM and SGLang features strata does not implement
      "logits_processors",
      "allowed_token_ids", "bad_words", "prompt_logprobs", "truncate_prompt_tokens",
      "length_penalty", "lora_path", "lora_request", "chat_template", "documents"};
  for (const auto& [key, value] : body.items()) {
    auto in = [&name = key](auto& list) {
      return std::find(std::begin(list), std::end(list), name) != std::end(list);
    };
    if (in(kCommon) || in(endpoint_fields)) continue;
    if (in(kUnsupported)) {
      if (value.is_null()) continue;
      if (key == "functions" || key == "function_call") {
        return ApiError::BadRequest(
            absl::StrCat(key,
                         " is not supported by this server (OpenAI deprecated functions and "
                         "function_call): send tools and tool_choice instead"),
            key);
      }
      return ApiError::BadRequest(absl::StrCat(key, " is not supported by this server"), key);
    }
    if (options.unknown_params == UnknownParams::kReject) {
      return ApiError::BadRequest(absl::StrCat("Unrecognized request argument supplied: ", key),
                                  key);
    }
    if (unknown->size() < kMaxUnknownParamsListed) {
      // Names reach logs and metric labels: anything but [A-Za-z0-9_.-] becomes '_'.
      std::string name = key.substr(0, kMaxUnknownParamNameBytes);
      for (char& c : name) {
        if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' &&
            c != '-') {
          c = '_';
        }
      }
      unknown->push_back(std::move(name));
    }
  }
  return std::nullopt;
}

absl::Status ParseUnknownParams(std::string_view name, UnknownParams* out) {
  if (name == "reject") {
    *out = UnknownParams::kReject;
  } else if (name == "warn") {
    *out = UnknownParams::kWarn;
  } else if (name == "ignore") {
    *out = UnknownParams::kIgnore;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown-params must be reject, warn or ignore, got '", std::string(name), "'"));
  }
  return absl::OkStatus();
}

std::string_view UnknownParamsName(UnknownParams policy) {
  switch (policy) {
    case UnknownParams::kReject:
      return "reject";
    case UnknownParams::kWarn:
      return "warn";
    case UnknownParams::kIgnore:
      return "ignore";
  }
  return "reject";
}

std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* out,
                                               const ParseOptions& options) {
  Json json;
  STRATA_RETURN_IF_API_ERROR(ParseBody(body, &json));
  STRATA_RETURN_IF_API_ERROR(ParseCommon(json, &out->common));
  STRATA_RETURN_IF_API_ERROR(CheckFieldNames(json,
                                             {"prompt", "logprobs", "echo", "suffix", "best_of"},
                                             options, &out->common.unknown_params));
  STRATA_RETURN_IF_API_ERROR(internal::ParseGuidedFields(body, json, &out->common.sampling));
  const Fields f(json);
  STRATA_RETURN_IF_API_ERROR(ParseMaxTokens(f, "max_tokens", &out->common.sampling));
  STRATA_RETURN_IF_API_ERROR(ParsePrompts(f, &out->prompts));
  STRATA_RETURN_IF_API_ERROR(f.Int("logprobs", 0, kMaxLogprobs, &out->common.sampling.logprobs));
  STRATA_RETURN_IF_API_ERROR(f.Bool("echo", &out->echo));
  if (out->echo && out->common.sampling.logprobs >= 0) {
    // The prompt's logprobs would have to come with it, and the backend returns none.
    return ApiError::BadRequest(
        "echo together with logprobs is not supported (the prompt tokens' logprobs are not "
        "computed); send one of them",
        "echo");
  }
  return CheckUnsupportedCompletionFields(f, out->common.n);
}

std::optional<ApiError> ParseChatRequest(std::string_view body, ChatRequest* out,
                                         const ParseOptions& options) {
  STRATA_RETURN_IF_API_ERROR(CheckBodyDepth(body));
  // ordered_json keeps the clients' key order inside messages (templates' tojson shows it).
  nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (ordered.is_discarded()) return ApiError::BadRequest("request body is not valid JSON");
  if (!ordered.is_object()) return ApiError::BadRequest("request body must be a JSON object");
  const Json json = Json::parse(body, nullptr, false);
  STRATA_RETURN_IF_API_ERROR(ParseCommon(json, &out->common));
  STRATA_RETURN_IF_API_ERROR(CheckFieldNames(
      json,
      {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "chat_template_kwargs",
       "add_generation_prompt", "continue_final_message", "tools", "tool_choice"},
      options, &out->common.unknown_params));
  STRATA_RETURN_IF_API_ERROR(internal::ParseGuidedFields(body, json, &out->common.sampling));
  const Fields f(json);
  STRATA_RETURN_IF_API_ERROR(ParseMaxTokens(f, "max_tokens", &out->common.sampling));
  STRATA_RETURN_IF_API_ERROR(ParseMaxTokens(f, "max_completion_tokens", &out->common.sampling));
  STRATA_RETURN_IF_API_ERROR(ParseChatLogprobs(f, out));
  STRATA_RETURN_IF_API_ERROR(ParseMessages(ordered, &out->messages));
  STRATA_RETURN_IF_API_ERROR(ParseContinuation(f, out->messages, &out->add_generation_prompt,
                                               &out->continue_final_message));
  STRATA_RETURN_IF_API_ERROR(internal::ParseToolFields(ordered, &out->tools));
  auto kwargs = ordered.find("chat_template_kwargs");
  if (kwargs != ordered.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) return Fields::TypeError("chat_template_kwargs", "an object");
    out->chat_template_kwargs = *kwargs;
  }
  return std::nullopt;
}

namespace {

std::optional<ApiError> OptionalModel(const Fields& f, std::string* model) {
  const Json* v = f.Find("model");
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return Fields::TypeError("model", "a string");
  *model = v->get<std::string>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseTokenizeRequest(std::string_view body, TokenizeRequest* out) {
  STRATA_RETURN_IF_API_ERROR(CheckBodyDepth(body));
  nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (ordered.is_discarded()) return ApiError::BadRequest("request body is not valid JSON");
  if (!ordered.is_object()) return ApiError::BadRequest("request body must be a JSON object");
  const Json json = Json::parse(body, nullptr, false);
  const Fields f(json);
  STRATA_RETURN_IF_API_ERROR(OptionalModel(f, &out->model));
  if (f.Find("add_special_tokens") != nullptr) {
    bool add = false;
    STRATA_RETURN_IF_API_ERROR(f.Bool("add_special_tokens", &add));
    out->add_special_tokens = add;
  }
  const Json* prompt = f.Find("prompt");
  if (prompt != nullptr) {
    if (!prompt->is_string()) return Fields::TypeError("prompt", "a string");
    out->prompt = prompt->get<std::string>();
    return std::nullopt;
  }
  if (f.Find("messages") == nullptr) {
    return ApiError::BadRequest("prompt or messages is required", "prompt");
  }
  out->chat = true;
  STRATA_RETURN_IF_API_ERROR(ParseMessages(ordered, &out->messages));
  STRATA_RETURN_IF_API_ERROR(ParseContinuation(f, out->messages, &out->add_generation_prompt,
                                               &out->continue_final_message));
  STRATA_RETURN_IF_API_ERROR(internal::ParseToolFields(ordered, &out->tools));
  auto kwargs = ordered.find("chat_template_kwargs");
  if (kwargs != ordered.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) return Fields::TypeError("chat_template_kwargs", "an object");
    out->chat_template_kwargs = *kwargs;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, DetokenizeRequest* out) {
  Json json;
  STRATA_RETURN_IF_API_ERROR(ParseBody(body, &json));
  const Fields f(json);
  STRATA_RETURN_IF_API_ERROR(OptionalModel(f, &out->model));
  const Json* tokens = f.Find("tokens");
  if (tokens == nullptr) return ApiError::BadRequest("tokens is required", "tokens");
  if (!tokens->is_array()) return Fields::TypeError("tokens", "an array of token ids");
  for (const Json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      return Fields::TypeError("tokens", "an array of token ids");
    }
    out->tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

}  // namespace strata::openai
