#include "strata/text/tokenizer.h"
#include "tokenizer_text.h"

namespace strata {

StreamDecoder::StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::Push(int32_t id) {
  if (tokenizer_->IsAddedToken(id)) {
    if (skip_special_ && tokenizer_->IsSpecial(id)) return "";
    // Decode treats an added token as a boundary: bytes before it decode on their own.
    std::string text = Flush();
    text += tokenizer_->TokenBytes(id);
    return text;
  }
  pending_ += tokenizer_->TokenBytes(id);
  size_t ready = tokenizer_internal::DecodablePrefixLength(pending_);
  if (ready == 0) return "";
  std::string text = tokenizer_internal::Utf8Lossy(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return text;
}

std::string StreamDecoder::Flush() {
  std::string text = tokenizer_internal::Utf8Lossy(pending_);
  pending_.clear();
  return text;
}

}  // namespace strata
