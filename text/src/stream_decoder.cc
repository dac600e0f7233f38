#include "strata/text/tokenizer.h"

namespace strata {

StreamDecoder::StreamDecoder(const Tokenizer* tokenizer, bool skip_special_tokens)
    : stream_(tokenizer->NewDecodeStream(skip_special_tokens)) {}

std::string StreamDecoder::Push(int32_t id) { return stream_->Push(id); }

std::string StreamDecoder::Flush() { return stream_->Flush(); }

}  // namespace strata
