#pragma once
// Pre-tokenizers of tokenizer.json: Split (regex or literal), Digits, ByteLevel, Metaspace,
// Sequence. Pieces stay raw UTF-8 bytes throughout; ByteLevel's byte-to-character mapping is left
// to the BPE model, which works on bytes directly (the mapping is a bijection). Metaspace's
// replacement character is written into the pieces, as the vocab of such models spells it.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

struct pcre2_real_code_8;

namespace strata::tokenizer_internal {

// Byte offsets [start, end) of one match.
using MatchSpan = std::pair<size_t, size_t>;

// A PCRE2 pattern with UTF and Unicode properties (so \s, \p{L}, (?i:...) and lookaheads behave
// like the Oniguruma regexes `tokenizers` compiles). Compiled once, JIT when available;
// FindAll is safe to call from many threads at once.
class Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-overlapping matches in `text` (valid UTF-8), leftmost first.
  void FindAll(std::string_view text, std::vector<MatchSpan>* out) const;

 private:
  explicit Regex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

// A literal string or a Regex, as tokenizer.json writes patterns ({"String": ...} or
// {"Regex": ...}); finds non-overlapping matches leftmost first. Thread-safe.
class TextPattern {
 public:
  // `what` names the owner in errors ("pre_tokenizer Split"); empty patterns are refused (they
  // would match between every two characters).
  static absl::StatusOr<TextPattern> FromJson(const nlohmann::json& pattern, std::string_view what);
  explicit TextPattern(std::string literal) : literal_(std::move(literal)) {}

  void FindAll(std::string_view text, std::vector<MatchSpan>* out) const;
  // Every match replaced by `content`.
  std::string ReplaceAll(std::string_view text, std::string_view content) const;
  // The literal, or empty for a regex.
  const std::string& literal() const { return literal_; }

 private:
  std::shared_ptr<const Regex> regex_;  // null for a literal
  std::string literal_;
};

// What a Split keeps of the matched delimiters (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The spans NormalizedString::split keeps of a text of `size` bytes around `matches` (sorted,
// non-overlapping); may include empty spans. `invert` swaps matches and gaps.
std::vector<MatchSpan> SplitSpans(size_t size, const std::vector<MatchSpan>& matches,
                                  SplitBehavior behavior, bool invert);

// Splits `text` around `matches` like SplitSpans, appending the non-empty pieces to `out`.
void SplitAroundMatches(std::string_view text, const std::vector<MatchSpan>& matches,
                        SplitBehavior behavior, bool invert, std::vector<std::string>* out);

// A piece of pre-tokenized text; `at_input_start` when it begins at offset 0 of the input.
struct PrePiece {
  std::string text;
  bool at_input_start = false;
};

// One step of the pipeline, e.g. a Split or a ByteLevel.
class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Appends the pieces of `piece` to `out` (empty ones may be appended; the caller drops them).
  virtual void Apply(const PrePiece& piece, std::vector<PrePiece>* out) const = 0;
};

class PreTokenizer {
 public:
  // Either byte-level (exactly one ByteLevel step, no Split/Digits after it: a regex after it
  // would see mapped characters) or character-level (no ByteLevel; Metaspace allowed; null
  // means one piece per text). `origin` names the file in errors.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& j,
                                                                std::string_view origin);

  // Splits `text` (valid UTF-8) into the non-empty pieces the model tokenizes: raw bytes for a
  // byte-level pipeline, UTF-8 for a character-level one. `at_input_start` says `text` begins
  // at offset 0 of the caller's input (Metaspace's prepend_scheme "first" needs it).
  void Run(std::string_view text, bool at_input_start, std::vector<std::string>* pieces) const;

  // True when the pipeline has a ByteLevel step (the model then works on bytes).
  bool byte_level() const { return byte_level_; }

 private:
  PreTokenizer(std::vector<std::unique_ptr<PreTokenizerStep>> steps, bool byte_level)
      : steps_(std::move(steps)), byte_level_(byte_level) {}
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
  bool byte_level_ = true;
};

}  // namespace strata::tokenizer_internal
