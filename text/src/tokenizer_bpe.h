#pragma once
// The BPE model of a tokenizer.json. Byte-level: works directly on raw bytes, byte b starting as
// the vocab entry of its ByteLevel character. Character-level (SentencePiece style): each UTF-8
// character starts as its vocab entry, else as its <0xNN> byte tokens (byte_fallback), else as
// unk_token. Then merges apply lowest rank first (leftmost on ties), exactly the order
// `tokenizers`' Word::merge_all uses.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata::tokenizer_internal {

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; `origin` names the file in errors.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model,
                                                            bool byte_level,
                                                            std::string_view origin);

  // Appends the ids of one pre-tokenized piece (raw bytes, or UTF-8 for character-level).
  // Thread-safe.
  void Tokenize(std::string_view piece, std::vector<int32_t>* out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocab string of `id`, or null when the vocab has no such id.
  const std::string* IdToToken(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  // How a byte starts a word: its token, its byte-fallback tokens, or unknown.
  struct ByteStart {
    std::vector<int32_t> ids;  // one id, or the <0xXX> fallback ids
    bool fallback = false;
    bool unknown = false;
  };

  BpeModel() = default;
  absl::Status ParseVocab(const nlohmann::json& vocab, std::string_view origin);
  absl::Status ParseMerges(const nlohmann::json& merges, std::string_view origin);
  absl::Status ParseOptions(const nlohmann::json& model, std::string_view origin);
  void InitByteStarts();
  // The start of the symbol of one raw byte (byte-level) or one character (character-level).
  ByteStart CharStart(std::string_view ch) const;
  void InitialSymbols(std::string_view piece, std::vector<int32_t>* ids) const;
  void MergeAll(std::vector<int32_t>* ids) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<std::string, int32_t> bytes_vocab_;  // raw bytes -> id, for ignore_merges
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<ByteStart, 256> byte_starts_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool byte_level_ = true;
  bool byte_fallback_ = false;
};

}  // namespace strata::tokenizer_internal
