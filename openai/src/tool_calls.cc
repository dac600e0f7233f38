#include "strata/openai/tool_calls.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "strata/common/json_limits.h"
#include "strata/grammar/grammar.h"

namespace strata::openai {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The longest proper prefix of `marker` that `text` ends with (0 when none).
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// Parses JSON text after bounding its nesting; discarded (is_discarded()) when invalid.
Json ParseBounded(std::string_view text) {
  if (!CheckJsonDepth(text, kMaxToolCallJsonDepth).ok()) return Json(Json::value_t::discarded);
  return Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// One call object: {"name": string, "arguments" or "parameters": object or JSON string}.
bool CallFromJson(const Json& j, ToolCall* call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return false;
  const std::string& n = name->get_ref<const std::string&>();
  if (n.empty() || n.size() > kMaxToolNameBytes) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  call->name = n;
  if (args == j.end() || args->is_null()) {
    call->arguments = "{}";
  } else if (args->is_object()) {
    call->arguments = Dump(*args);
  } else if (args->is_string()) {
    call->arguments = args->get<std::string>();
  } else {
    return false;
  }
  return true;
}

// Hermes: the text between <tool_call> and </tool_call> is one call object.
bool ParseHermesBody(std::string_view body, std::vector<ToolCall>* calls) {
  ToolCall call;
  if (!CallFromJson(ParseBounded(Trim(body)), &call)) return false;
  calls->push_back(std::move(call));
  return true;
}

// Mistral's later form, after the first [TOOL_CALLS]: `name[ARGS]{...}`, each further call
// behind another [TOOL_CALLS].
bool ParseMistralNamedCalls(std::string_view body, std::vector<ToolCall>* calls) {
  constexpr std::string_view kArgs = "[ARGS]";
  while (true) {
    const size_t next = body.find(kMistralOpen);
    const std::string_view one = body.substr(0, next);
    const size_t args = one.find(kArgs);
    if (args == std::string_view::npos) return false;
    Json j = Json::object();
    j["name"] = std::string(Trim(one.substr(0, args)));
    j["arguments"] = ParseBounded(Trim(one.substr(args + kArgs.size())));
    ToolCall call;
    if (j["arguments"].is_discarded() || !CallFromJson(j, &call)) return false;
    calls->push_back(std::move(call));
    if (next == std::string_view::npos) return true;
    body = body.substr(next + kMistralOpen.size());
  }
}

// Mistral: a JSON array of call objects (or a single object), or the named form above.
bool ParseMistralBody(std::string_view body, std::vector<ToolCall>* calls) {
  body = Trim(body);
  if (!body.empty() && body.front() != '[' && body.front() != '{') {
    return ParseMistralNamedCalls(body, calls);
  }
  const Json j = ParseBounded(body);
  if (j.is_object()) {
    ToolCall call;
    if (!CallFromJson(j, &call)) return false;
    calls->push_back(std::move(call));
    return true;
  }
  if (!j.is_array() || j.empty()) return false;
  for (const Json& item : j) {
    ToolCall call;
    if (!CallFromJson(item, &call)) return false;
    calls->push_back(std::move(call));
  }
  return true;
}

// The length of the JSON object that starts text[0] == '{' (strings and escapes respected), or
// 0 when it does not close or nests deeper than kMaxToolCallJsonDepth.
size_t ObjectLength(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxToolCallJsonDepth) return 0;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
      if (depth < 0) return 0;
    }
  }
  return 0;
}

// Llama 3: one or more call objects separated by ';' (and whitespace).
bool ParseLlamaBody(std::string_view body, std::vector<ToolCall>* calls) {
  body = Trim(body);
  while (!body.empty()) {
    if (body.front() != '{') return false;
    const size_t len = ObjectLength(body);
    if (len == 0) return false;
    ToolCall call;
    if (!CallFromJson(ParseBounded(body.substr(0, len)), &call)) return false;
    calls->push_back(std::move(call));
    body = Trim(body.substr(len));
    if (!body.empty()) {
      if (body.front() != ';') return false;
      body = Trim(body.substr(1));
    }
  }
  return !calls->empty();
}

}  // namespace

absl::Status ParseToolCallParser(std::string_view name, ToolCallParser* out) {
  for (ToolCallParser p :
       {ToolCallParser::kAuto, ToolCallParser::kNone, ToolCallParser::kLlama3Json,
        ToolCallParser::kHermes, ToolCallParser::kMistral}) {
    if (name == ToolCallParserName(p)) {
      *out = p;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tool-call-parser must be auto, none, llama3_json, hermes or mistral, got '",
                   std::string(name), "'"));
}

absl::StatusOr<GuidedDecoding> ToolCallConstraint(const ToolsSpec& tools, ToolCallParser parser) {
  using Ordered = nlohmann::ordered_json;
  // Llama 3's templates ask for "parameters", the others for "arguments" (the parsers take both).
  const char* args_key = parser == ToolCallParser::kLlama3Json ? "parameters" : "arguments";
  Ordered options = Ordered::array();
  for (const Ordered& tool : tools.tools) {
    const Ordered& fn = tool.at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (tools.choice == ToolChoice::kFunction && name != tools.function_name) continue;
    Ordered params = Ordered{{"type", "object"}};
    if (auto it = fn.find("parameters"); it != fn.end() && it->is_object()) params = *it;
    Ordered call = {{"type", "object"},
                    {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                    {"required", {"name", args_key}},
                    {"additionalProperties", false}};
    options.push_back(std::move(call));
  }
  if (options.empty()) return absl::InvalidArgumentError("no function to call");
  const Ordered call = options.size() == 1 ? options[0] : Ordered{{"anyOf", options}};
  GuidedDecoding g;
  g.kind = GuidedDecoding::Kind::kToolCalls;
  absl::Status last;
  for (int max_calls : {tools.parallel_tool_calls ? 4 : 1, tools.parallel_tool_calls ? 2 : 1, 1}) {
    const Ordered spec = {{"format", std::string(ToolCallParserName(parser))},
                          {"call", call},
                          {"max_calls", max_calls}};
    g.spec = spec.dump();
    if (g.spec.size() > GuidedDecoding::kMaxSpecBytes) {
      return absl::InvalidArgumentError(absl::StrCat("the tools' schemas take ", g.spec.size(),
                                                     " bytes; at most ",
                                                     GuidedDecoding::kMaxSpecBytes, " are accepted"));
    }
    auto compiled = grammar::Grammar::Compile(g);
    if (compiled.ok()) return g;
    last = compiled.status();
    if (max_calls == 1) break;
  }
  return last;
}

std::string_view ToolCallParserName(ToolCallParser parser) {
  switch (parser) {
    case ToolCallParser::kAuto:
      return "auto";
    case ToolCallParser::kNone:
      return "none";
    case ToolCallParser::kLlama3Json:
      return "llama3_json";
    case ToolCallParser::kHermes:
      return "hermes";
    case ToolCallParser::kMistral:
      return "mistral";
  }
  return "none";
}

ToolCallParser DetectToolCallParser(std::string_view source) {
  auto has = [source](std::string_view marker) {
    return source.find(marker) != std::string_view::npos;
  };
  if (has(kHermesOpen)) return ToolCallParser::kHermes;
  if (has(kMistralOpen)) return ToolCallParser::kMistral;
  if (has(kPythonTag)) return ToolCallParser::kLlama3Json;
  if (has("<|start_header_id|>") && has("tools")) {
    return ToolCallParser::kLlama3Json;
  }
  return ToolCallParser::kNone;
}

std::string NewToolCallId(ToolCallParser parser) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local absl::BitGen gen;
  const bool mistral = parser == ToolCallParser::kMistral;
  std::string id = mistral ? "" : "call_";
  const int n = mistral ? 9 : 24;
  for (int i = 0; i < n; ++i) id += kAlnum[absl::Uniform<size_t>(gen, 0, sizeof(kAlnum) - 1)];
  return id;
}

ToolCallStreamParser::ToolCallStreamParser(ToolCallParser parser) : parser_(parser) {
  if (parser_ == ToolCallParser::kAuto) parser_ = ToolCallParser::kNone;
}

ToolCallOutput ToolCallStreamParser::Feed(std::string_view text) {
  ToolCallOutput out;
  if (parser_ == ToolCallParser::kNone) {
    out.content = std::string(text);
    return out;
  }
  buf_.append(text);
  Process(/*final=*/false, &out);
  return out;
}

ToolCallOutput ToolCallStreamParser::Finish() {
  ToolCallOutput out;
  if (parser_ == ToolCallParser::kNone) return out;
  Process(/*final=*/true, &out);
  // Whitespace still held stands alone at the end: after a call it only separated calls;
  // with no call at all it is the whole output, which stays as generated.
  if (calls_ == 0) out.content += ws_;
  ws_.clear();
  return out;
}

void ToolCallStreamParser::Process(bool final, ToolCallOutput* out) {
  for (;;) {
    const Mode before = mode_;
    const size_t size_before = buf_.size();
    const bool started_before = started_;
    switch (mode_) {
      case Mode::kTextOnly:
        EmitContent(buf_, out);
        buf_.clear();
        return;
      case Mode::kText:
        if (parser_ == ToolCallParser::kLlama3Json) {
          ProcessLlamaStart(final, out);
        } else {
          ProcessText(final, out);
        }
        break;
      case Mode::kCall:
        ProcessCall(final, out);
        break;
    }
    if (mode_ == before && buf_.size() == size_before && started_ == started_before) return;
  }
}

void ToolCallStreamParser::ProcessText(bool final, ToolCallOutput* out) {
  const std::string_view open = parser_ == ToolCallParser::kHermes ? kHermesOpen : kMistralOpen;
  const size_t at = buf_.find(open);
  if (at != std::string::npos && calls_ < kMaxToolCallsPerOutput) {
    EmitContent(std::string_view(buf_).substr(0, at), out);
    call_open_ = ws_ + std::string(open);
    ws_.clear();
    buf_.erase(0, at + open.size());
    searched_ = 0;
    mode_ = Mode::kCall;
    return;
  }
  if (at != std::string::npos) {  // no room for more calls
    mode_ = Mode::kTextOnly;
    return;
  }
  const size_t keep = final ? 0 : MarkerPrefixAtEnd(buf_, open);
  EmitContent(std::string_view(buf_).substr(0, buf_.size() - keep), out);
  buf_.erase(0, buf_.size() - keep);
}

void ToolCallStreamParser::ProcessLlamaStart(bool final, ToolCallOutput* out) {
  if (started_) {
    mode_ = Mode::kTextOnly;
    return;
  }
  size_t ws = 0;
  while (ws < buf_.size() && IsSpace(buf_[ws])) ++ws;
  ws_.append(buf_, 0, ws);
  buf_.erase(0, ws);
  if (ws_.size() > kMaxToolCallBytes) {  // no call starts this late; held whitespace is bounded
    started_ = true;
    mode_ = Mode::kTextOnly;
    return;
  }
  if (buf_.empty()) return;
  if (buf_.front() == '{') {
    started_ = true;
    call_open_ = std::move(ws_);
    ws_.clear();
    searched_ = 0;
    mode_ = Mode::kCall;
    return;
  }
  if (std::string_view(buf_).starts_with(kPythonTag)) {
    started_ = true;
    call_open_ = ws_ + std::string(kPythonTag);
    ws_.clear();
    buf_.erase(0, kPythonTag.size());
    searched_ = 0;
    mode_ = Mode::kCall;
    return;
  }
  if (!final && kPythonTag.starts_with(buf_)) return;  // may still become the tag
  started_ = true;
  mode_ = Mode::kTextOnly;
}

void ToolCallStreamParser::ProcessCall(bool final, ToolCallOutput* out) {
  std::vector<ToolCall> calls;
  size_t consumed = 0;  // bytes of buf_ that make up the call (its end marker included)
  bool parsed = false;
  if (parser_ == ToolCallParser::kHermes) {
    const size_t at = buf_.find(kHermesClose, searched_);
    if (at == std::string::npos) {
      // A call that cannot end within the bound any more is content.
      if (buf_.size() > kMaxToolCallBytes + kHermesClose.size() - 1) {
        return FailCall(buf_.size(), /*over_limit=*/true, out);
      }
      searched_ = buf_.size() >= kHermesClose.size() ? buf_.size() - kHermesClose.size() + 1 : 0;
      if (!final) return;
      // The output ended inside the call: it counts when what came is a whole call.
      if (buf_.size() > kMaxToolCallBytes) return FailCall(buf_.size(), true, out);
      consumed = buf_.size();
      parsed = ParseHermesBody(buf_, &calls);
    } else {
      consumed = at + kHermesClose.size();
      if (at > kMaxToolCallBytes) return FailCall(consumed, /*over_limit=*/true, out);
      parsed = ParseHermesBody(std::string_view(buf_).substr(0, at), &calls);
    }
  } else {
    // Mistral and Llama 3: the call runs to the end of the output.
    if (buf_.size() > kMaxToolCallBytes) return FailCall(buf_.size(), /*over_limit=*/true, out);
    if (!final) return;
    consumed = buf_.size();
    parsed = parser_ == ToolCallParser::kMistral ? ParseMistralBody(buf_, &calls)
                                                 : ParseLlamaBody(buf_, &calls);
  }
  if (!parsed || calls_ + static_cast<int>(calls.size()) > kMaxToolCallsPerOutput) {
    return FailCall(consumed, /*over_limit=*/false, out);
  }
  calls_ += static_cast<int>(calls.size());
  for (ToolCall& c : calls) out->calls.push_back(std::move(c));
  buf_.erase(0, consumed);
  call_open_.clear();
  at_segment_start_ = true;
  mode_ = Mode::kText;
}

void ToolCallStreamParser::FailCall(size_t consumed, bool over_limit, ToolCallOutput* out) {
  std::string text = std::move(call_open_);
  call_open_.clear();
  text.append(buf_, 0, consumed);
  buf_.erase(0, consumed);
  EmitContent(text, out);
  mode_ = over_limit ? Mode::kTextOnly : Mode::kText;
}

void ToolCallStreamParser::EmitContent(std::string_view text, ToolCallOutput* out) {
  if (text.empty()) return;
  if (at_segment_start_) {
    // Whitespace is held while it may still only separate calls, up to the bound on what the
    // parser holds; beyond it, it is content like any text.
    if (std::all_of(text.begin(), text.end(), IsSpace) &&
        ws_.size() + text.size() <= kMaxToolCallBytes) {
      ws_.append(text);
      return;
    }
    out->content += ws_;
    ws_.clear();
    at_segment_start_ = false;
  }
  out->content.append(text);
}

ToolCallOutput ParseToolCalls(ToolCallParser parser, std::string_view text) {
  ToolCallStreamParser stream(parser);
  ToolCallOutput out = stream.Feed(text);
  ToolCallOutput rest = stream.Finish();
  out.content += rest.content;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace strata::openai
