#pragma once
// Hugging Face `tokenizer.json` byte-level BPE (GPT-2, Llama 3, Qwen2/3 style).
//
// Supported: normalizer (none, NFC, Sequence of those); pre_tokenizer ByteLevel (with or
// without its GPT-2 regex, add_prefix_space), Split (Regex/String pattern, behaviors
// Isolated/Removed/MergedWithPrevious/MergedWithNext/Contiguous, invert), Digits, Sequence;
// model BPE with merges (string "a b" or pair form), ignore_merges, unk token; added tokens
// (special and not, lstrip/rstrip/single_word/normalized); post_processor TemplateProcessing /
// ByteLevel / Sequence; decoder ByteLevel (invalid UTF-8 decodes as U+FFFD like HF).
// Encoding matches `tokenizers` exactly; anything unsupported is an error at load time.
//
// Thread-safe after construction (Encode/Decode are const).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json,
                                                             std::string_view origin = "<json>");
  virtual ~Tokenizer() = default;

  // add_special_tokens applies the post-processor (e.g. Llama 3's BOS), as HF's default does.
  virtual std::vector<int32_t> Encode(std::string_view text,
                                      bool add_special_tokens = false) const = 0;
  virtual std::string Decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = false) const = 0;
  // Raw bytes of one token after the decoder's byte mapping (may be a partial UTF-8 sequence).
  virtual std::string TokenBytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;  // max id + 1 over vocab and added tokens
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual std::optional<std::string> IdToToken(int32_t id) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
};

// Incremental detokenization for streaming: Push returns only text that is complete UTF-8
// (never a broken sequence); bytes of an unfinished character wait for the next tokens.
// Flush returns what is left (an unfinishable tail as U+FFFD).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens = true);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

// Trains a byte-level BPE tokenizer (Llama-3 pre-tokenizer regex, ByteLevel decoder) on
// `corpus` deterministically and returns its tokenizer.json, loadable by HF `tokenizers`.
// vocab_size counts the 256 byte tokens and the merges; special tokens are appended after.
absl::StatusOr<std::string> TrainByteLevelBpe(std::string_view corpus, int vocab_size,
                                              const std::vector<std::string>& special_tokens);

}  // namespace strata
