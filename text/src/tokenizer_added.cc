#include "tokenizer_added.h"

#include <algorithm>
#include <utility>

#include "tokenizer_text.h"

namespace strata::tokenizer_internal {
namespace {

// The last character of valid UTF-8 `s` (non-empty).
char32_t LastChar(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  size_t len = 0;
  return DecodeUtf8(s.substr(start), &len).value_or(kReplacementChar);
}

char32_t FirstChar(std::string_view s) {
  size_t len = 0;
  return DecodeUtf8(s, &len).value_or(kReplacementChar);
}

// Byte offset where the trailing whitespace of `s` begins.
size_t TrailingSpaceStart(std::string_view s) {
  size_t start = s.size();
  ForEachChar(s, [&](char32_t c, size_t pos, size_t /*len*/) {
    if (!IsWhitespace(c)) {
      start = s.size();
    } else if (start == s.size()) {
      start = pos;
    }
  });
  return start;
}

// Length of the leading whitespace of `s`.
size_t LeadingSpaceLength(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = 0;
    std::optional<char32_t> c = DecodeUtf8(s.substr(pos), &len);
    if (!c || !IsWhitespace(*c)) break;
    pos += len;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (!patterns[i].empty()) Insert(patterns[i], static_cast<int32_t>(i));
  }
}

void AddedTokenMatcher::Insert(std::string_view pattern, int32_t token) {
  first_byte_[static_cast<uint8_t>(pattern[0])] = true;
  int32_t node = 0;
  for (char ch : pattern) {
    uint8_t b = static_cast<uint8_t>(ch);
    auto it = nodes_[node].children.find(b);
    if (it == nodes_[node].children.end()) {
      nodes_.emplace_back();
      int32_t child = static_cast<int32_t>(nodes_.size()) - 1;
      nodes_[node].children[b] = child;
      node = child;
    } else {
      node = it->second;
    }
  }
  // The first of two identical patterns wins, as Aho-Corasick reports the lower pattern id.
  if (nodes_[node].token < 0) nodes_[node].token = token;
}

AddedTokenMatcher::Match AddedTokenMatcher::LongestAt(std::string_view text, size_t pos) const {
  Match best{pos, pos, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = nodes_[node].children.find(static_cast<uint8_t>(text[i]));
    if (it == nodes_[node].children.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) best = Match{pos, i + 1, nodes_[node].token};
  }
  return best;
}

std::vector<AddedTokenMatcher::Match> AddedTokenMatcher::LeftmostLongest(
    std::string_view text) const {
  std::vector<Match> matches;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    Match m = LongestAt(text, pos);
    if (m.token < 0) {
      ++pos;
      continue;
    }
    matches.push_back(m);
    pos = m.end;
  }
  return matches;
}

bool AddedTokenMatcher::AcceptSingleWord(std::string_view text, const Match& m) const {
  bool space_before = m.start == 0 || !IsWordChar(LastChar(text.substr(0, m.start)));
  bool space_after = m.end == text.size() || !IsWordChar(FirstChar(text.substr(m.end)));
  return space_before && space_after;
}

std::vector<TextSegment> AddedTokenMatcher::Split(std::string_view text) const {
  std::vector<TextSegment> segments;
  if (nodes_.size() <= 1) {
    segments.push_back({text, -1});
    return segments;
  }
  size_t offset = 0;  // end of the previous segment
  for (const Match& m : LeftmostLongest(text)) {
    const AddedToken& token = tokens_[m.token];
    if (token.single_word && !AcceptSingleWord(text, m)) continue;
    // A token may start inside the whitespace a previous rstrip token took; clamp to keep the
    // segments disjoint.
    size_t start = std::max(m.start, offset);
    size_t end = std::max(m.end, offset);
    // Stripped whitespace belongs to the token (and so disappears from the text).
    if (token.lstrip) start = std::max(TrailingSpaceStart(text.substr(0, start)), offset);
    if (token.rstrip) end += LeadingSpaceLength(text.substr(end));
    if (offset < start) segments.push_back({text.substr(offset, start - offset), -1});
    segments.push_back({text.substr(start, end - start), token.id});
    offset = end;
  }
  if (offset < text.size()) segments.push_back({text.substr(offset), -1});
  return segments;
}

}  // namespace strata::tokenizer_internal
