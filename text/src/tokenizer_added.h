#pragma once
// Added tokens of tokenizer.json ("added_tokens"): found in the input before anything else,
// leftmost-longest like `tokenizers`' Aho-Corasick matcher, honouring single_word, lstrip and
// rstrip.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace strata::tokenizer_internal {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A piece of the input: either plain text or one added token (id >= 0, text = what it covers).
struct TextSegment {
  std::string_view text;
  int32_t id = -1;
};

// Finds a set of added tokens in text. Immutable after construction; thread-safe.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the string that identifies `tokens[i]` (its content, normalized for the
  // normalized set). Empty patterns never match.
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  // Splits `text` into segments in order; text segments may be empty, callers skip them.
  std::vector<TextSegment> Split(std::string_view text) const;

 private:
  struct Node {
    absl::flat_hash_map<uint8_t, int32_t> children;
    int32_t token = -1;  // index into tokens_ of the pattern ending here
  };
  struct Match {
    size_t start;
    size_t end;
    int32_t token;
  };
  void Insert(std::string_view pattern, int32_t token);
  // The longest pattern starting at `pos`, or token -1.
  Match LongestAt(std::string_view text, size_t pos) const;
  std::vector<Match> LeftmostLongest(std::string_view text) const;
  bool AcceptSingleWord(std::string_view text, const Match& m) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace strata::tokenizer_internal
