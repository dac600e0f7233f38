#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "tokenizer_pre.h"
#include "tokenizer_text.h"

namespace strata::tokenizer_internal {
namespace {

using json = nlohmann::json;

// GPT-2's pre-tokenization regex, used by ByteLevel when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// JIT stack per thread. Tokenizer regexes need little (single-character repeats run without
// stack); a match that needs more falls back to the interpreter, which uses the heap.
constexpr size_t kMaxJitStack = 1 << 20;

// Per-thread PCRE2 scratch: match data, match context and JIT stack.
class MatchScratch {
 public:
  static MatchScratch& ForThisThread() {
    thread_local MatchScratch scratch;
    return scratch;
  }
  pcre2_match_data* data() const { return data_; }
  pcre2_match_context* context() const { return context_; }

 private:
  MatchScratch()
      : data_(pcre2_match_data_create(1, nullptr)),
        context_(pcre2_match_context_create(nullptr)),
        jit_stack_(pcre2_jit_stack_create(32 * 1024, kMaxJitStack, nullptr)) {
    STRATA_CHECK(data_ != nullptr && context_ != nullptr) << "PCRE2 allocation failed";
    if (jit_stack_ != nullptr) pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data_);
    pcre2_match_context_free(context_);
    if (jit_stack_ != nullptr) pcre2_jit_stack_free(jit_stack_);
  }
  pcre2_match_data* data_;
  pcre2_match_context* context_;
  pcre2_jit_stack* jit_stack_;
};

SplitBehavior ParseBehavior(std::string_view name, bool* ok) {
  *ok = true;
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  *ok = false;
  return SplitBehavior::kIsolated;
}

// (span, is_match) pieces covering the whole text, as `tokenizers`' Pattern::find_matches.
using Segment = std::pair<MatchSpan, bool>;

std::vector<Segment> CoverText(size_t size, const std::vector<MatchSpan>& matches, bool invert) {
  std::vector<Segment> segments;
  if (size == 0) {
    segments.push_back({{0, 0}, invert});
    return segments;
  }
  size_t prev = 0;
  for (const MatchSpan& m : matches) {
    if (prev != m.first) segments.push_back({{prev, m.first}, invert});
    segments.push_back({m, !invert});
    prev = m.second;
  }
  if (prev != size) segments.push_back({{prev, size}, invert});
  return segments;
}

// Applies a merge behavior: returns the spans to keep.
std::vector<MatchSpan> MergeSegments(const std::vector<Segment>& segments, SplitBehavior behavior) {
  std::vector<MatchSpan> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.second) kept.push_back(s.first);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) kept.push_back(s.first);
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        bool merge = behavior == SplitBehavior::kContiguous ? s.second == previous_match
                                                            : s.second && !previous_match;
        if (merge && !kept.empty()) {
          kept.back().second = s.first.second;
        } else {
          kept.push_back(s.first);
        }
        previous_match = s.second;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->second && !previous_match && !kept.empty()) {
          kept.back().first = it->first.first;
        } else {
          kept.push_back(it->first);
        }
        previous_match = it->second;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  return kept;
}

void FindLiteral(std::string_view text, std::string_view literal, std::vector<MatchSpan>* out) {
  size_t pos = 0;
  while ((pos = text.find(literal, pos)) != std::string_view::npos) {
    out->push_back({pos, pos + literal.size()});
    pos += literal.size();
  }
}

// Appends the non-empty kept spans of `piece`; the first span keeps the piece's input-start
// flag when it begins at the piece's start.
void AppendSpans(const PrePiece& piece, const std::vector<MatchSpan>& spans,
                 std::vector<PrePiece>* out) {
  for (const MatchSpan& span : spans) {
    if (span.second <= span.first) continue;
    out->push_back({piece.text.substr(span.first, span.second - span.first),
                    piece.at_input_start && span.first == 0});
  }
}

class SplitStep : public PreTokenizerStep {
 public:
  SplitStep(TextPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void Apply(const PrePiece& piece, std::vector<PrePiece>* out) const override {
    std::vector<MatchSpan> matches;
    pattern_.FindAll(piece.text, &matches);
    AppendSpans(piece, SplitSpans(piece.text.size(), matches, behavior_, invert_), out);
  }

 private:
  TextPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelStep : public PreTokenizerStep {
 public:
  ByteLevelStep(bool add_prefix_space, const Regex* regex)
      : add_prefix_space_(add_prefix_space), regex_(regex) {}
  void Apply(const PrePiece& piece, std::vector<PrePiece>* out) const override {
    PrePiece prefixed{piece.text, piece.at_input_start};
    if (add_prefix_space_ && (piece.text.empty() || piece.text.front() != ' ')) {
      prefixed.text.insert(0, " ");
    }
    if (regex_ == nullptr) {
      out->push_back(std::move(prefixed));
      return;
    }
    std::vector<MatchSpan> matches;
    regex_->FindAll(prefixed.text, &matches);
    AppendSpans(prefixed,
                SplitSpans(prefixed.text.size(), matches, SplitBehavior::kIsolated, false), out);
  }

 private:
  bool add_prefix_space_;
  const Regex* regex_;  // GPT-2 regex or null; process-lifetime
};

enum class PrependScheme { kAlways, kFirst, kNever };

// SentencePiece-style whitespace: every U+0020 becomes the replacement character (normally
// U+2581), which is prepended as the scheme says unless the piece already starts with it; with
// split, the piece is cut before each replacement character (MergedWithNext).
class MetaspaceStep : public PreTokenizerStep {
 public:
  MetaspaceStep(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void Apply(const PrePiece& piece, std::vector<PrePiece>* out) const override {
    PrePiece replaced{TextPattern(" ").ReplaceAll(piece.text, replacement_), piece.at_input_start};
    bool prepend = scheme_ == PrependScheme::kAlways ||
                   (scheme_ == PrependScheme::kFirst && piece.at_input_start);
    if (prepend && !replaced.text.starts_with(replacement_)) {
      replaced.text.insert(0, replacement_);
    }
    if (!split_) {
      out->push_back(std::move(replaced));
      return;
    }
    std::vector<MatchSpan> matches;
    TextPattern(replacement_).FindAll(replaced.text, &matches);
    AppendSpans(replaced,
                SplitSpans(replaced.text.size(), matches, SplitBehavior::kMergedWithNext, false),
                out);
  }

 private:
  std::string replacement_;  // one character, UTF-8
  PrependScheme scheme_;
  bool split_;
};

const Regex* Gpt2Regex() {
  static const Regex* regex = [] {
    absl::StatusOr<std::unique_ptr<Regex>> r = Regex::Compile(kGpt2Pattern);
    STRATA_CHECK(r.ok()) << r.status();
    return r->release();
  }();
  return regex;
}

absl::Status InvalidStep(std::string_view origin, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": pre_tokenizer ", Sv(what)));
}

bool BoolField(const json& j, const char* key, bool default_value) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return default_value;
  return it->is_boolean() ? it->get<bool>() : default_value;
}

absl::StatusOr<std::unique_ptr<PreTokenizerStep>> ParseSplit(const json& j,
                                                             std::string_view origin) {
  bool ok = false;
  std::string behavior_name = j.value("behavior", std::string());
  SplitBehavior behavior = ParseBehavior(behavior_name, &ok);
  if (!ok)
    return InvalidStep(origin, absl::StrCat("Split: unknown behavior '", behavior_name, "'"));
  bool invert = BoolField(j, "invert", false);
  absl::StatusOr<TextPattern> pattern = TextPattern::FromJson(j.value("pattern", json()), "Split");
  if (!pattern.ok()) return InvalidStep(origin, std::string(pattern.status().message()));
  return std::make_unique<SplitStep>(std::move(*pattern), behavior, invert);
}

absl::StatusOr<std::unique_ptr<PreTokenizerStep>> ParseMetaspace(const json& j,
                                                                 std::string_view origin) {
  const json replacement = j.value("replacement", json());
  size_t len = 0;
  if (!replacement.is_string() || !DecodeUtf8(replacement.get<std::string>(), &len) ||
      len != replacement.get<std::string>().size()) {
    return InvalidStep(origin, "Metaspace: replacement must be one character");
  }
  const std::string scheme_name = j.value("prepend_scheme", std::string("always"));
  PrependScheme scheme = PrependScheme::kAlways;
  if (scheme_name == "first") {
    scheme = PrependScheme::kFirst;
  } else if (scheme_name == "never") {
    scheme = PrependScheme::kNever;
  } else if (scheme_name != "always") {
    return InvalidStep(origin, absl::StrCat("Metaspace: unknown prepend_scheme '", scheme_name,
                                            "' (supported: always, first, never)"));
  }
  // The older add_prefix_space=false spells prepend_scheme "never" (`tokenizers` refuses a
  // contradiction).
  if (!BoolField(j, "add_prefix_space", true)) {
    if (scheme != PrependScheme::kNever && j.contains("prepend_scheme")) {
      return InvalidStep(origin, "Metaspace: add_prefix_space=false contradicts prepend_scheme");
    }
    scheme = PrependScheme::kNever;
  }
  return std::make_unique<MetaspaceStep>(replacement.get<std::string>(), scheme,
                                         BoolField(j, "split", true));
}

// Parses `j` into `steps`, flattening Sequences; `kinds` records each step's type for checks.
absl::Status ParseInto(const json& j, std::string_view origin,
                       std::vector<std::unique_ptr<PreTokenizerStep>>* steps,
                       std::vector<std::string>* kinds) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidStep(origin, "without a type");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return InvalidStep(origin, "Sequence without a pretokenizers list");
    }
    for (const json& step : j["pretokenizers"]) {
      STRATA_RETURN_IF_ERROR(ParseInto(step, origin, steps, kinds));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizerStep> step, ParseSplit(j, origin));
    steps->push_back(std::move(step));
  } else if (type == "Digits") {
    STRATA_ASSIGN_OR_RETURN(TextPattern digits,
                            TextPattern::FromJson(json::object({{"Regex", R"(\p{N})"}}), "Digits"));
    SplitBehavior behavior = BoolField(j, "individual_digits", false) ? SplitBehavior::kIsolated
                                                                      : SplitBehavior::kContiguous;
    steps->push_back(std::make_unique<SplitStep>(std::move(digits), behavior, false));
  } else if (type == "ByteLevel") {
    const Regex* regex = BoolField(j, "use_regex", true) ? Gpt2Regex() : nullptr;
    steps->push_back(
        std::make_unique<ByteLevelStep>(BoolField(j, "add_prefix_space", true), regex));
  } else if (type == "Metaspace") {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizerStep> step, ParseMetaspace(j, origin));
    steps->push_back(std::move(step));
  } else {
    return InvalidStep(origin, absl::StrCat("'", type,
                                            "' is unsupported (supported: ByteLevel, Metaspace, "
                                            "Split, Digits, Sequence)"));
  }
  kinds->push_back(type);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("bad regex '", Sv(pattern), "' at offset ",
                                                   offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  // Without JIT (unsupported platform) pcre2_match falls back to the interpreter.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::FindAll(std::string_view text, std::vector<MatchSpan>* out) const {
  MatchScratch& scratch = MatchScratch::ForThisThread();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, scratch.data(),
                         scratch.context());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Deep backtracking: the interpreter keeps its frames on the heap instead.
      rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       scratch.data(), scratch.context());
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      // Only resource limits get here (the text is valid UTF-8); the rest stays one gap.
      STRATA_LOG(Error) << "tokenizer regex match failed with PCRE2 error " << rc;
      return;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data());
    out->push_back({ovector[0], ovector[1]});
    pos = ovector[1];
    if (ovector[1] == ovector[0]) {
      // An empty match: step over one character so the search moves on.
      if (pos >= text.size()) return;
      size_t len = 1;
      DecodeUtf8(text.substr(pos), &len);
      pos += len;
    }
  }
}

std::vector<MatchSpan> SplitSpans(size_t size, const std::vector<MatchSpan>& matches,
                                  SplitBehavior behavior, bool invert) {
  return MergeSegments(CoverText(size, matches, invert), behavior);
}

void SplitAroundMatches(std::string_view text, const std::vector<MatchSpan>& matches,
                        SplitBehavior behavior, bool invert, std::vector<std::string>* out) {
  for (const MatchSpan& span : SplitSpans(text.size(), matches, behavior, invert)) {
    if (span.second > span.first) {
      out->emplace_back(text.substr(span.first, span.second - span.first));
    }
  }
}

absl::StatusOr<TextPattern> TextPattern::FromJson(const json& pattern, std::string_view what) {
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    const std::string source = pattern["Regex"].get<std::string>();
    if (source.empty()) return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": empty Regex"));
    absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Compile(source);
    if (!regex.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": ", regex.status().message()));
    }
    TextPattern result("");
    result.regex_ = std::shared_ptr<const Regex>(std::move(*regex));
    return result;
  }
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    std::string literal = pattern["String"].get<std::string>();
    if (literal.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(what), ": empty String pattern is unsupported"));
    }
    return TextPattern(std::move(literal));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(what), ": pattern must be {\"Regex\": ...} or {\"String\": ...}"));
}

void TextPattern::FindAll(std::string_view text, std::vector<MatchSpan>* out) const {
  if (regex_ != nullptr) {
    regex_->FindAll(text, out);
  } else {
    FindLiteral(text, literal_, out);
  }
}

std::string TextPattern::ReplaceAll(std::string_view text, std::string_view content) const {
  std::vector<MatchSpan> matches;
  FindAll(text, &matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const MatchSpan& m : matches) {
    out.append(text.substr(prev, m.first - prev));
    out.append(content);
    prev = m.second;
  }
  out.append(text.substr(prev));
  return out;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const json& j,
                                                                     std::string_view origin) {
  std::vector<std::unique_ptr<PreTokenizerStep>> steps;
  std::vector<std::string> kinds;
  if (!j.is_null()) STRATA_RETURN_IF_ERROR(ParseInto(j, origin, &steps, &kinds));
  int byte_level = 0;
  bool metaspace = false;
  for (const std::string& kind : kinds) {
    if (kind == "ByteLevel") {
      ++byte_level;
    } else if (byte_level > 0) {
      return InvalidStep(origin, absl::StrCat(kind, " after ByteLevel is unsupported"));
    }
    metaspace = metaspace || kind == "Metaspace";
  }
  if (byte_level > 1) return InvalidStep(origin, "with more than one ByteLevel is unsupported");
  if (byte_level == 1 && metaspace) {
    return InvalidStep(origin, "with both ByteLevel and Metaspace is unsupported");
  }
  return std::unique_ptr<PreTokenizer>(new PreTokenizer(std::move(steps), byte_level == 1));
}

void PreTokenizer::Run(std::string_view text, bool at_input_start,
                       std::vector<std::string>* pieces) const {
  std::vector<PrePiece> current;
  current.push_back({std::string(text), at_input_start});
  std::vector<PrePiece> next;
  for (const auto& step : steps_) {
    next.clear();
    for (const PrePiece& piece : current) {
      if (!piece.text.empty()) step->Apply(piece, &next);
    }
    current.swap(next);
  }
  for (PrePiece& piece : current) {
    if (!piece.text.empty()) pieces->push_back(std::move(piece.text));
  }
}

}  // namespace strata::tokenizer_internal
