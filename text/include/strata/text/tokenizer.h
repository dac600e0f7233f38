#pragma once
// Hugging Face `tokenizer.json` BPE: byte-level (GPT-2, Llama 3, Qwen2/3 style) and
// SentencePiece style (Llama 2, Mistral, Mixtral: Metaspace or Prepend/Replace normalizers,
// byte_fallback, ByteFallback/Fuse/Strip decoders).
//
// Supported: normalizer (none, NFC/NFD/NFKC/NFKD via ICU, Replace with a String or Regex
// pattern, Prepend, Sequence of those); pre_tokenizer (none, ByteLevel with or without its GPT-2
// regex and add_prefix_space, Metaspace with prepend_scheme always/first/never and split on or
// off, Split with a Regex (PCRE2 with Unicode properties) or String pattern and behaviors
// Isolated/Removed/MergedWithPrevious/MergedWithNext/Contiguous and invert, Digits, Sequence);
// model BPE with merges ("a b" strings or [a, b] pairs), ignore_merges, unk_token/fuse_unk,
// byte_fallback (<0xNN> tokens for characters not in the vocab); added tokens (special and not;
// lstrip/rstrip/single_word/normalized; leftmost-longest match before normalization);
// post_processor TemplateProcessing / ByteLevel / RobertaProcessing / BertProcessing / Sequence;
// decoder ByteLevel (invalid UTF-8 decodes as U+FFFD exactly like HF), Metaspace, Replace,
// ByteFallback, Fuse, Strip, Sequence of those, or none (tokens joined by spaces).
// With a ByteLevel pre-tokenizer the model works on bytes; without one, on characters.
// Encoding and decoding match `tokenizers` exactly; anything unsupported is an InvalidArgument
// error at load time naming the file and the feature. "truncation" and "padding" are ignored
// (transformers turns them off for every call it does not ask them for, too). Files over
// 512 MiB or nested over 64 levels are refused.
// Not supported: other models (WordPiece, Unigram, ...), BPE dropout / subword prefixes,
// ByteLevel together with Metaspace, and a ByteLevel decoder after Fuse.
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
  // Invalid UTF-8 in `text` is first replaced by U+FFFD (one per maximal invalid subpart).
  virtual std::vector<int32_t> Encode(std::string_view text,
                                      bool add_special_tokens = false) const = 0;
  // Like HF: ids that are neither vocab nor added tokens (negative, out of range) are skipped;
  // the rest go through the decoder as their vocab strings or, for added tokens, their content
  // (normalized content when normalized=true), special ones dropped when skip_special_tokens.
  // A ByteLevel decoder turns runs of vocab tokens into bytes (invalid UTF-8 -> U+FFFD per
  // maximal subpart) and inserts added tokens as they are.
  virtual std::string Decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = false) const = 0;
  // Raw bytes of one token after the decoder's per-token mapping, as it reads in the middle of a
  // text (ByteLevel's bytes, "<0xE4>" as byte E4, U+2581 as a space; may be a partial UTF-8
  // sequence); an added token's decoded content; empty for an unknown id.
  virtual std::string TokenBytes(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;  // max id + 1 over vocab and added tokens
  // Added tokens by content first, then the vocab (spelled as tokenizer.json spells it: "Ġthe"
  // byte-level, "▁the" SentencePiece style).
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual std::optional<std::string> IdToToken(int32_t id) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  // True for every "added_tokens" entry, special or not.
  virtual bool IsAddedToken(int32_t id) const = 0;

  // Decode one id at a time (what StreamDecoder uses). Push returns the text that no later id
  // can change; Flush returns the rest and starts over. Not thread-safe; one per stream.
  class DecodeStream {
   public:
    virtual ~DecodeStream() = default;
    virtual std::string Push(int32_t id) = 0;
    virtual std::string Flush() = 0;
  };
  virtual std::unique_ptr<DecodeStream> NewDecodeStream(bool skip_special_tokens) const = 0;
};

// Incremental detokenization for streaming: Push returns only text that is complete UTF-8
// (never a broken sequence) and final; what later tokens may still change waits: bytes of an
// unfinished character, a run of <0xNN> byte-fallback tokens (invalid as a whole, each becomes
// U+FFFD), trailing characters a Strip decoder may remove. Flush returns what is left (an
// unfinishable tail as U+FFFD). The concatenation of all Push results and Flush equals
// Decode(all ids, skip_special_tokens). Not thread-safe; one per stream.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens = true);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  std::unique_ptr<Tokenizer::DecodeStream> stream_;
};

// Trains a byte-level BPE tokenizer (Llama-3 pre-tokenizer regex + ByteLevel(use_regex=false),
// ignore_merges, ByteLevel decoder) on `corpus` deterministically and returns its
// tokenizer.json, loadable by HF `tokenizers` and encoding the same there as here.
// vocab_size counts the 256 byte tokens (ids 0..255 in byte order) and the merged tokens; it is
// smaller when the corpus runs out of pairs. Each step merges the most frequent adjacent pair
// (ties: smallest left id, then smallest right id). Special tokens get the ids after the vocab,
// in order; occurrences of them in the corpus are not trained on. A non-empty `bos_token` (one
// of special_tokens) is added by Encode(..., add_special_tokens=true), like Llama 3.
// With `fill_to_vocab_size`, a vocab the corpus cannot fill is completed with lowercase letter
// strings, shortest first, each with and without a leading space (" a", "a", ..., " zz", "zz",
// " aaa", ...), each a merge of its first bytes and its last letter: a tokenizer with a real
// model's vocab size (128,256 for Llama 3) whose every token decodes to plain text.
// InvalidArgument when vocab_size < 256, a special token is empty or repeated, or bos_token is
// not one of them.
absl::StatusOr<std::string> TrainByteLevelBpe(std::string_view corpus, int vocab_size,
                                              const std::vector<std::string>& special_tokens,
                                              std::string_view bos_token = "",
                                              bool fill_to_vocab_size = false);

}  // namespace strata
