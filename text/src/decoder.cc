#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"
#include "tokenizer_decoder.h"
#include "tokenizer_pre.h"
#include "tokenizer_text.h"

namespace strata::tokenizer_internal {
namespace {

using json = nlohmann::json;

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

absl::Status DecoderError(std::string_view origin, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": decoder ", Sv(what)));
}

// Each step knows whether it sees the token list (one unit per token) or, after Fuse or
// ByteLevel, the single fused text in chunks.
class ReplaceStep : public DecoderStep {
 public:
  ReplaceStep(TextPattern pattern, std::string content, bool fused)
      : pattern_(std::move(pattern)), content_(std::move(content)), fused_(fused) {}
  void Push(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    if (!fused_) {
      out->push_back({pattern_.ReplaceAll(unit.text, content_), unit.added});
      return;
    }
    state->held += unit.text;
    if (pattern_.literal().empty()) return;  // a regex sees the whole text at Finish
    // Replace the complete matches, leftmost first; hold the tail that may start one.
    const std::string& literal = pattern_.literal();
    std::string_view held = state->held;
    std::string text;
    size_t pos = 0;
    for (size_t p; (p = held.find(literal, pos)) != std::string_view::npos;
         pos = p + literal.size()) {
      text.append(held.substr(pos, p - pos));
      text.append(content_);
    }
    size_t keep = held.size();
    for (size_t k = std::max(pos, held.size() + 1 - std::min(held.size() + 1, literal.size()));
         k < held.size(); ++k) {
      if (std::string_view(literal).starts_with(held.substr(k))) {
        keep = k;
        break;
      }
    }
    text.append(held.substr(pos, keep - pos));
    state->held.erase(0, keep);
    out->push_back({std::move(text)});
  }
  void Finish(DecodeStepState* state, std::vector<DecodeUnit>* out) const override {
    if (fused_) out->push_back({pattern_.ReplaceAll(state->held, content_)});
  }
  std::string MapToken(std::string token) const override {
    return pattern_.ReplaceAll(token, content_);
  }

 private:
  TextPattern pattern_;
  std::string content_;
  bool fused_;
};

// The first token loses its replacement characters (unless prepend_scheme is never); the
// others turn them into spaces.
class MetaspaceStep : public DecoderStep {
 public:
  MetaspaceStep(std::string replacement, bool strips_first, bool fused)
      : replacement_(std::move(replacement)), strips_first_(strips_first), fused_(fused) {}
  void Push(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    bool first = fused_ || state->count++ == 0;
    out->push_back({Map(unit.text, first && strips_first_), unit.added});
  }
  std::string MapToken(std::string token) const override {
    return Map(token, fused_ && strips_first_);
  }

 private:
  std::string Map(std::string_view text, bool remove) const {
    return TextPattern(replacement_).ReplaceAll(text, remove ? "" : " ");
  }
  std::string replacement_;
  bool strips_first_;
  bool fused_;
};

// The byte of a "<0xNN>" token, parsed as `tokenizers` does (Rust's u8::from_str_radix, which
// also takes a leading '+').
std::optional<uint8_t> FallbackByte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = digit(token[3]);
  int lo = digit(token[4]);
  if (token[3] == '+' && lo >= 0) return static_cast<uint8_t>(lo);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// Runs of <0xNN> tokens become their bytes when those are valid UTF-8, else one U+FFFD per byte.
class ByteFallbackStep : public DecoderStep {
 public:
  explicit ByteFallbackStep(bool fused) : fused_(fused) {}
  void Push(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    if (fused_) {
      PushFused(state, std::move(unit), out);
      return;
    }
    if (std::optional<uint8_t> b = FallbackByte(unit.text)) {
      state->held.push_back(static_cast<char>(*b));
      return;
    }
    Release(state, out);
    out->push_back(std::move(unit));
  }
  void Finish(DecodeStepState* state, std::vector<DecodeUnit>* out) const override {
    if (!fused_) {
      Release(state, out);
    } else if (!state->done) {
      // The whole text is one token: a byte token only if it is exactly "<0xNN>".
      std::optional<uint8_t> b = FallbackByte(state->held);
      if (b && *b < 0x80) {
        state->held = std::string(1, static_cast<char>(*b));
      } else if (b) {
        state->held = kReplacementUtf8;
      }
      out->push_back({std::move(state->held)});
    }
  }
  std::string MapToken(std::string token) const override {
    if (fused_) return token;
    std::optional<uint8_t> b = FallbackByte(token);
    return b ? std::string(1, static_cast<char>(*b)) : token;
  }

 private:
  static void Release(DecodeStepState* state, std::vector<DecodeUnit>* out) {
    if (state->held.empty()) return;
    if (IsValidUtf8(state->held)) {
      out->push_back({std::move(state->held)});
    } else {
      for (size_t i = 0; i < state->held.size(); ++i)
        out->push_back({std::string(kReplacementUtf8)});
    }
    state->held.clear();
  }
  // Holds the fused text while it may still be a lone byte token (six bytes at most).
  static void PushFused(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) {
    if (state->done) {
      out->push_back(std::move(unit));
      return;
    }
    state->held += unit.text;
    if (state->held.size() > 6) {
      out->push_back({std::move(state->held)});
      state->held.clear();
      state->done = true;
    }
  }
  bool fused_;
};

// Joins the tokens into one text (the steps after it see chunks of that text).
class FuseStep : public DecoderStep {
 public:
  void Push(DecodeStepState*, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    out->push_back(std::move(unit));
  }
};

// No decoder: `tokenizers` joins the tokens with single spaces.
class JoinWithSpacesStep : public DecoderStep {
 public:
  void Push(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    if (state->count++ > 0) unit.text.insert(0, " ");
    out->push_back(std::move(unit));
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters of each token, or of
// the whole text after Fuse.
class StripStep : public DecoderStep {
 public:
  StripStep(std::string content, int64_t start, int64_t stop, bool fused)
      : content_(std::move(content)), start_(start), stop_(stop), fused_(fused) {}
  void Push(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    if (!fused_) {
      out->push_back({StripToken(unit.text), unit.added});
      return;
    }
    std::string_view text = unit.text;
    while (!state->done && !text.empty()) {
      if (state->count < start_ && text.starts_with(content_)) {
        text.remove_prefix(content_.size());
        ++state->count;
      } else {
        state->done = true;
      }
    }
    if (text.empty()) return;
    std::string all = state->held + std::string(text);
    size_t tail = TrailingCount(all, stop_);
    state->held = all.substr(all.size() - tail * content_.size());
    all.resize(all.size() - tail * content_.size());
    out->push_back({std::move(all)});
  }
  void Finish(DecodeStepState* state, std::vector<DecodeUnit>* out) const override {
    // The held characters are the text's last ones, all `content`, no more than `stop`.
    if (fused_) state->held.clear();
    (void)out;
  }
  std::string MapToken(std::string token) const override {
    return fused_ ? token : StripToken(token);
  }

 private:
  // How many (at most `limit`) copies of content_ end `text`.
  size_t TrailingCount(std::string_view text, int64_t limit) const {
    size_t n = 0;
    while (static_cast<int64_t>(n) < limit && text.ends_with(content_)) {
      text.remove_suffix(content_.size());
      ++n;
    }
    return n;
  }
  std::string StripToken(std::string_view text) const {
    int64_t n = 0;
    while (n < start_ && text.starts_with(content_)) {
      text.remove_prefix(content_.size());
      ++n;
    }
    text.remove_suffix(TrailingCount(text, stop_) * content_.size());
    return std::string(text);
  }
  std::string content_;  // one character, UTF-8
  int64_t start_;
  int64_t stop_;
  bool fused_;
};

// GPT-2's byte alphabet back to bytes; invalid UTF-8 becomes U+FFFD per maximal invalid
// subpart. A token with characters outside the alphabet stands for its own UTF-8; an added
// token is inserted as it is, after the bytes before it are decoded.
class ByteLevelStep : public DecoderStep {
 public:
  void Push(DecodeStepState* state, DecodeUnit unit, std::vector<DecodeUnit>* out) const override {
    if (unit.added) {
      out->push_back({Utf8Lossy(state->held)});
      state->held.clear();
      out->push_back({std::move(unit.text)});
      return;
    }
    state->held += MapToken(std::move(unit.text));
    size_t ready = DecodablePrefixLength(state->held);
    if (ready == 0) return;
    out->push_back({Utf8Lossy(std::string_view(state->held).substr(0, ready))});
    state->held.erase(0, ready);
  }
  void Finish(DecodeStepState* state, std::vector<DecodeUnit>* out) const override {
    out->push_back({Utf8Lossy(state->held)});
  }
  std::string MapToken(std::string token) const override {
    std::optional<std::string> bytes = ByteAlphabet::Get().Decode(token);
    return bytes ? std::move(*bytes) : token;
  }
};

// The one character of a "replacement" / "content" field.
absl::StatusOr<std::string> OneChar(const json& j, const char* key, std::string_view origin,
                                    std::string_view type) {
  auto it = j.find(key);
  size_t len = 0;
  if (it == j.end() || !it->is_string() || !DecodeUtf8(it->get<std::string>(), &len) ||
      len != it->get<std::string>().size()) {
    return DecoderError(origin, absl::StrCat(Sv(type), ": '", key, "' must be one character"));
  }
  return it->get<std::string>();
}

absl::StatusOr<int64_t> Count(const json& j, const char* key, std::string_view origin) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > (uint64_t{1} << 20)) {
    return DecoderError(origin, absl::StrCat("Strip: bad '", key, "'"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<std::unique_ptr<DecoderStep>> ParseStep(const json& j, const std::string& type,
                                                       bool fused, std::string_view origin) {
  if (type == "Replace") {
    absl::StatusOr<TextPattern> pattern =
        TextPattern::FromJson(j.value("pattern", json()), "decoder Replace");
    if (!pattern.ok()) return DecoderError(origin, std::string(pattern.status().message()));
    if (!j.contains("content") || !j["content"].is_string()) {
      return DecoderError(origin, "Replace without a content string");
    }
    return std::make_unique<ReplaceStep>(std::move(*pattern), j["content"].get<std::string>(),
                                         fused);
  }
  if (type == "Metaspace") {
    STRATA_ASSIGN_OR_RETURN(std::string replacement, OneChar(j, "replacement", origin, type));
    const std::string scheme = j.value("prepend_scheme", std::string("always"));
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return DecoderError(origin, absl::StrCat("Metaspace: unknown prepend_scheme '", scheme, "'"));
    }
    bool add_prefix_space = !j.contains("add_prefix_space") ||
                            !j["add_prefix_space"].is_boolean() ||
                            j["add_prefix_space"].get<bool>();
    bool strips_first = scheme != "never" && add_prefix_space;
    return std::make_unique<MetaspaceStep>(std::move(replacement), strips_first, fused);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackStep>(fused);
  if (type == "Fuse") return std::make_unique<FuseStep>();
  if (type == "Strip") {
    STRATA_ASSIGN_OR_RETURN(std::string content, OneChar(j, "content", origin, type));
    STRATA_ASSIGN_OR_RETURN(int64_t start, Count(j, "start", origin));
    STRATA_ASSIGN_OR_RETURN(int64_t stop, Count(j, "stop", origin));
    return std::make_unique<StripStep>(std::move(content), start, stop, fused);
  }
  if (type == "ByteLevel") {
    if (fused) return DecoderError(origin, "ByteLevel after Fuse or ByteLevel is unsupported");
    return std::make_unique<ByteLevelStep>();
  }
  return DecoderError(origin, absl::StrCat("'", type,
                                           "' is unsupported (supported: ByteLevel, Metaspace, "
                                           "Replace, ByteFallback, Fuse, Strip, Sequence)"));
}

// Parses `j` into `steps`, flattening Sequences; `fused` tracks whether the token list has
// become one text yet.
absl::Status ParseInto(const json& j, std::string_view origin, int depth,
                       std::vector<std::unique_ptr<DecoderStep>>* steps, bool* fused) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return DecoderError(origin, "without a type");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (depth >= Decoder::kMaxDepth) return DecoderError(origin, "Sequences nest too deeply");
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return DecoderError(origin, "Sequence without a decoders list");
    }
    for (const json& step : j["decoders"]) {
      STRATA_RETURN_IF_ERROR(ParseInto(step, origin, depth + 1, steps, fused));
    }
    return absl::OkStatus();
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DecoderStep> step, ParseStep(j, type, *fused, origin));
  steps->push_back(std::move(step));
  *fused = *fused || type == "Fuse" || type == "ByteLevel";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::FromJson(const json& j, std::string_view origin) {
  std::vector<std::unique_ptr<DecoderStep>> steps;
  bool fused = false;
  if (!j.is_null()) STRATA_RETURN_IF_ERROR(ParseInto(j, origin, 0, &steps, &fused));
  // `tokenizers` joins what is left of the token list with nothing in between, or with spaces
  // when there is no decoder.
  if (j.is_null()) steps.push_back(std::make_unique<JoinWithSpacesStep>());
  return std::unique_ptr<Decoder>(new Decoder(std::move(steps)));
}

DecodeState Decoder::NewState() const {
  DecodeState state;
  state.steps.resize(steps_.size());
  return state;
}

void Decoder::Push(DecodeState* state, DecodeUnit unit, std::string* out) const {
  std::vector<DecodeUnit> current;
  current.push_back(std::move(unit));
  std::vector<DecodeUnit> next;
  for (size_t i = 0; i < steps_.size() && !current.empty(); ++i) {
    next.clear();
    for (DecodeUnit& u : current) steps_[i]->Push(&state->steps[i], std::move(u), &next);
    current.swap(next);
  }
  for (const DecodeUnit& u : current) out->append(u.text);
}

void Decoder::Finish(DecodeState* state, std::string* out) const {
  std::vector<DecodeUnit> current;
  std::vector<DecodeUnit> next;
  for (size_t i = 0; i < steps_.size(); ++i) {
    next.clear();
    for (DecodeUnit& u : current) steps_[i]->Push(&state->steps[i], std::move(u), &next);
    steps_[i]->Finish(&state->steps[i], &next);
    current.swap(next);
  }
  for (const DecodeUnit& u : current) out->append(u.text);
  *state = NewState();
}

std::string Decoder::TokenBytes(std::string_view token) const {
  std::string text(token);
  for (const auto& step : steps_) text = step->MapToken(std::move(text));
  return text;
}

}  // namespace strata::tokenizer_internal
