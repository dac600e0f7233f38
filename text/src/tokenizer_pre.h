#pragma once
// Pre-tokenizers of tokenizer.json: Split (regex or literal), Digits, ByteLevel, Sequence.
// Pieces stay raw UTF-8 bytes throughout; ByteLevel's byte-to-character mapping is left to the
// BPE model, which works on bytes directly (the mapping is a bijection).
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

// What a Split keeps of the matched delimiters (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `text` around `matches` (sorted, non-overlapping) the way NormalizedString::split does,
// appending the non-empty pieces to `out`. `invert` swaps matches and gaps.
void SplitAroundMatches(std::string_view text, const std::vector<MatchSpan>& matches,
                        SplitBehavior behavior, bool invert, std::vector<std::string>* out);

// One step of the pipeline, e.g. a Split or a ByteLevel.
class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Appends the pieces of `piece` to `out` (empty ones may be appended; the caller drops them).
  virtual void Apply(std::string_view piece, std::vector<std::string>* out) const = 0;
};

class PreTokenizer {
 public:
  // Requires exactly one ByteLevel step with no Split/Digits after it (a regex after it would
  // see mapped characters); `origin` names the file in errors.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& j,
                                                                std::string_view origin);

  // Splits `text` (valid UTF-8) into the non-empty raw-byte pieces the model tokenizes.
  void Run(std::string_view text, std::vector<std::string>* pieces) const;

 private:
  explicit PreTokenizer(std::vector<std::unique_ptr<PreTokenizerStep>> steps)
      : steps_(std::move(steps)) {}
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
};

}  // namespace strata::tokenizer_internal
