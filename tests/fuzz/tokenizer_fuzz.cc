// Fuzzes the tokenizer.json loader: the input is loaded as a tokenizer.json; a tokenizer that
// loads encodes and decodes a short fixed text, decodes a few fixed and out-of-range ids, and
// streams them through a StreamDecoder. Inputs over 64 KiB are skipped.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "strata/text/tokenizer.h"

namespace {

constexpr size_t kMaxJsonBytes = 64 << 10;
// Byte-level and SentencePiece-style material: CJK and an emoji (byte fallback), runs of spaces,
// the metaspace marker U+2581, special-token spellings, invalid UTF-8.
constexpr std::string_view kText =
    " Hello, world! 12345 h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c  \n\t"
    "<|eot_id|><s>[INST] \xe2\x96\x81x\xf0\x9f\x98\x80?? \xff\xc3";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxJsonBytes) return 0;
  auto tokenizer =
      strata::Tokenizer::FromJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!tokenizer.ok()) return 0;
  const strata::Tokenizer& tok = **tokenizer;
  std::vector<int32_t> ids = tok.Encode(kText, /*add_special_tokens=*/true);
  (void)tok.Decode(ids, /*skip_special_tokens=*/false);
  (void)tok.Decode(ids, /*skip_special_tokens=*/true);
  for (int32_t id : {-1, 0, 1, 255, tok.vocab_size() - 1, tok.vocab_size(), INT32_MAX}) {
    ids.push_back(id);
    (void)tok.TokenBytes(id);
    (void)tok.IdToToken(id);
    (void)tok.IsSpecial(id);
  }
  (void)tok.Decode(ids);
  strata::StreamDecoder stream(&tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  // The StreamDecoder contract: its pieces add up to Decode(ids, skip_special_tokens).
  if (streamed != tok.Decode(ids, /*skip_special_tokens=*/true)) __builtin_trap();
  (void)tok.TokenToId("<|eot_id|>");
  return 0;
}
