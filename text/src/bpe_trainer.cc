// Deterministic byte-level BPE training for built-in model presets.
#include <algorithm>
#include <map>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/status_macros.h"
#include "strata/text/tokenizer.h"
#include "tokenizer_added.h"
#include "tokenizer_pre.h"
#include "tokenizer_text.h"

namespace strata {
namespace {

using json = nlohmann::json;
using tokenizer_internal::ByteAlphabet;
using tokenizer_internal::MatchSpan;
using tokenizer_internal::Regex;
using tokenizer_internal::Sv;

// Llama 3's pre-tokenization regex.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t LeftOf(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t RightOf(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

// Word (raw bytes) -> occurrences, ordered so training never depends on hash order.
absl::StatusOr<std::map<std::string, int64_t>> CountWords(
    std::string_view corpus, const std::vector<std::string>& special_tokens) {
  const std::string text = tokenizer_internal::Utf8Lossy(corpus);
  std::vector<tokenizer_internal::AddedToken> tokens;
  for (const std::string& s : special_tokens) tokens.push_back({.content = s, .special = true});
  tokenizer_internal::AddedTokenMatcher specials(tokens, special_tokens);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, Regex::Compile(kLlama3Pattern));
  std::map<std::string, int64_t> words;
  std::vector<MatchSpan> matches;
  std::vector<std::string> pieces;
  for (const tokenizer_internal::TextSegment& segment : specials.Split(text)) {
    if (segment.id >= 0 || segment.text.empty()) continue;  // special tokens are not trained
    matches.clear();
    pieces.clear();
    regex->FindAll(segment.text, &matches);
    tokenizer_internal::SplitAroundMatches(
        segment.text, matches, tokenizer_internal::SplitBehavior::kIsolated, false, &pieces);
    for (const std::string& piece : pieces) ++words[piece];
  }
  return words;
}

// Incremental BPE: pair counts are updated only in the words a merge touches.
class BpeTrainer {
 public:
  explicit BpeTrainer(const std::map<std::string, int64_t>& words);
  // Merges until the vocab has `vocab_size` tokens or no pair is left.
  void Train(int vocab_size);
  // Adds letter strings until the vocab has `vocab_size` tokens (see TrainByteLevelBpe).
  void Fill(int vocab_size);
  const std::vector<std::string>& tokens() const { return tokens_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  // Max count first; ties go to the smallest (left, right) ids.
  struct Entry {
    int64_t count;
    uint64_t key;
    bool operator<(const Entry& o) const {
      if (count != o.count) return count < o.count;
      return std::make_tuple(LeftOf(key), RightOf(key)) >
             std::make_tuple(LeftOf(o.key), RightOf(o.key));
    }
  };
  void AddPairs(int32_t word, int64_t sign, absl::flat_hash_set<uint64_t>* changed);
  void MergeWord(int32_t word, uint64_t key, int32_t new_id,
                 absl::flat_hash_set<uint64_t>* changed);
  int32_t TokenFor(const std::string& bytes);

  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> freqs_;
  absl::flat_hash_map<uint64_t, int64_t> counts_;
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> where_;  // may hold stale word ids
  std::priority_queue<Entry> queue_;
  std::vector<std::string> tokens_;  // raw bytes per id
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
};

BpeTrainer::BpeTrainer(const std::map<std::string, int64_t>& words) {
  for (int b = 0; b < 256; ++b) TokenFor(std::string(1, static_cast<char>(b)));
  absl::flat_hash_set<uint64_t> changed;
  for (const auto& [word, freq] : words) {
    words_.emplace_back(word.begin(), word.end());
    for (int32_t& id : words_.back()) id = static_cast<uint8_t>(id);
    freqs_.push_back(freq);
    AddPairs(static_cast<int32_t>(words_.size()) - 1, 1, &changed);
  }
  for (uint64_t key : changed) queue_.push({counts_[key], key});
}

int32_t BpeTrainer::TokenFor(const std::string& bytes) {
  auto [it, inserted] = token_ids_.emplace(bytes, static_cast<int32_t>(tokens_.size()));
  if (inserted) tokens_.push_back(bytes);
  return it->second;
}

void BpeTrainer::AddPairs(int32_t word, int64_t sign, absl::flat_hash_set<uint64_t>* changed) {
  const std::vector<int32_t>& w = words_[word];
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    uint64_t key = PairKey(w[i], w[i + 1]);
    counts_[key] += sign * freqs_[word];
    if (sign > 0) where_[key].push_back(word);
    changed->insert(key);
  }
}

void BpeTrainer::MergeWord(int32_t word, uint64_t key, int32_t new_id,
                           absl::flat_hash_set<uint64_t>* changed) {
  std::vector<int32_t>& w = words_[word];
  const int32_t left = LeftOf(key);
  const int32_t right = RightOf(key);
  AddPairs(word, -1, changed);
  std::vector<int32_t> merged;
  merged.reserve(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    if (i + 1 < w.size() && w[i] == left && w[i + 1] == right) {
      merged.push_back(new_id);
      ++i;
    } else {
      merged.push_back(w[i]);
    }
  }
  w = std::move(merged);
  AddPairs(word, 1, changed);
}

void BpeTrainer::Train(int vocab_size) {
  while (static_cast<int>(tokens_.size()) < vocab_size && !queue_.empty()) {
    Entry top = queue_.top();
    queue_.pop();
    auto count = counts_.find(top.key);
    if (count == counts_.end() || count->second != top.count || top.count <= 0) continue;
    const int32_t left = LeftOf(top.key);
    const int32_t right = RightOf(top.key);
    // Two merge paths can spell the same bytes; the second reuses the first one's token.
    const int32_t new_id = TokenFor(tokens_[left] + tokens_[right]);
    merges_.push_back({left, right});
    std::vector<int32_t> affected = std::move(where_[top.key]);
    where_.erase(top.key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    absl::flat_hash_set<uint64_t> changed;
    for (int32_t word : affected) MergeWord(word, top.key, new_id, &changed);
    for (uint64_t key : changed) {
      auto it = counts_.find(key);
      if (it->second > 0) {
        queue_.push({it->second, key});
      } else {
        counts_.erase(it);
      }
    }
  }
}

void BpeTrainer::Fill(int vocab_size) {
  // Level n holds the strings of n lowercase letters, with and without a leading space; each
  // new string is a merge of its first n-1 bytes (a token of the previous level, or one the
  // corpus made) and its last letter, so every merge's parts are tokens. Strings the vocab
  // already has are skipped.
  std::vector<std::string> level = {""};
  for (int n = 1; static_cast<int>(tokens_.size()) < vocab_size; ++n) {
    std::vector<std::string> next;
    next.reserve(level.size() * 26);
    for (const std::string& prefix : level) {
      for (char letter = 'a'; letter <= 'z'; ++letter) next.push_back(prefix + letter);
    }
    for (const char* lead : {" ", ""}) {
      for (const std::string& word : next) {
        if (static_cast<int>(tokens_.size()) >= vocab_size) return;
        const std::string text = lead + word;
        if (text.size() < 2 || token_ids_.contains(text)) continue;
        const int32_t left = token_ids_.at(text.substr(0, text.size() - 1));
        const int32_t right = token_ids_.at(text.substr(text.size() - 1));
        TokenFor(text);
        merges_.push_back({left, right});
      }
    }
    level = std::move(next);
  }
}

json SpecialTokenJson(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

json ByteLevelJson(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

json BosTemplateJson(const std::string& bos, int32_t bos_id) {
  json special = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
  json seq_a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  json seq_b = {{"Sequence", {{"id", "B"}, {"type_id", 1}}}};
  json special_b = {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}};
  return {{"type", "TemplateProcessing"},
          {"single", {special, seq_a}},
          {"pair", {special, seq_a, special_b, seq_b}},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
}

json ModelJson(const BpeTrainer& trainer) {
  const ByteAlphabet& alphabet = ByteAlphabet::Get();
  json vocab = json::object();
  const std::vector<std::string>& tokens = trainer.tokens();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[alphabet.Encode(tokens[id])] = id;
  json merges = json::array();
  for (const auto& [left, right] : trainer.merges()) {
    merges.push_back({alphabet.Encode(tokens[left]), alphabet.Encode(tokens[right])});
  }
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", true},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

absl::Status CheckTrainingArgs(int vocab_size, const std::vector<std::string>& special_tokens,
                               std::string_view bos_token) {
  if (vocab_size < 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainByteLevelBpe: vocab_size ", vocab_size, " < 256 byte tokens"));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& s : special_tokens) {
    if (s.empty() || !tokenizer_internal::IsValidUtf8(s) || !seen.insert(s).second) {
      return absl::InvalidArgumentError(absl::StrCat("TrainByteLevelBpe: special token '", s,
                                                     "' is empty, repeated or not "
                                                     "UTF-8"));
    }
  }
  if (!bos_token.empty() && !seen.contains(Sv(bos_token))) {
    return absl::InvalidArgumentError(absl::StrCat("TrainByteLevelBpe: bos_token '", Sv(bos_token),
                                                   "' is not one of the special tokens"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TrainByteLevelBpe(std::string_view corpus, int vocab_size,
                                              const std::vector<std::string>& special_tokens,
                                              std::string_view bos_token,
                                              bool fill_to_vocab_size) {
  STRATA_RETURN_IF_ERROR(CheckTrainingArgs(vocab_size, special_tokens, bos_token));
  STRATA_ASSIGN_OR_RETURN(auto words, CountWords(corpus, special_tokens));
  BpeTrainer trainer(words);
  trainer.Train(vocab_size);
  if (fill_to_vocab_size) trainer.Fill(vocab_size);
  json model = ModelJson(trainer);
  const int32_t first_special = static_cast<int32_t>(trainer.tokens().size());
  json added = json::array();
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    // `tokenizers` would give a token already in the vocab the vocab's id instead.
    if (model["vocab"].contains(special_tokens[i])) {
      return absl::InvalidArgumentError(absl::StrCat("TrainByteLevelBpe: special token '",
                                                     special_tokens[i], "' is also a vocab token"));
    }
    added.push_back(SpecialTokenJson(first_special + static_cast<int32_t>(i), special_tokens[i]));
  }
  json post = ByteLevelJson(true, false, true);
  if (!bos_token.empty()) {
    auto pos = std::find(special_tokens.begin(), special_tokens.end(), bos_token);
    int32_t bos_id = first_special + static_cast<int32_t>(pos - special_tokens.begin());
    post = {{"type", "Sequence"},
            {"processors", {post, BosTemplateJson(std::string(bos_token), bos_id)}}};
  }
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"},
                 {"pattern", {{"Regex", std::string(kLlama3Pattern)}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                ByteLevelJson(false, true, false)}}};
  json root = {{"version", "1.0"},         {"truncation", nullptr},
               {"padding", nullptr},       {"added_tokens", added},
               {"normalizer", nullptr},    {"pre_tokenizer", pre},
               {"post_processor", post},   {"decoder", ByteLevelJson(true, true, true)},
               {"model", std::move(model)}};
  return root.dump(1);
}

}  // namespace strata
