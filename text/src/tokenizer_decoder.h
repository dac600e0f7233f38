#pragma once
// The decoder of a tokenizer.json: turns the token strings of a Decode (vocab strings and added
// tokens' contents) into text, exactly as `tokenizers` does, and does so incrementally so that
// streaming and whole decodes run the same code.
//
// Supported: ByteLevel, Metaspace, Replace (literal or regex pattern), ByteFallback, Fuse,
// Strip, and Sequences of them. `tokenizers` applies each step to the list of token strings in
// turn; here every step is a streaming transducer over that list: it takes the strings one at a
// time, may hold some back (ByteFallback a run of <0xNN> tokens, Strip trailing characters),
// and passes strings on to the next step. After Fuse or ByteLevel the list is one string, which
// flows through the later steps in chunks; steps then act on it as a whole (Strip trims its
// ends, Metaspace treats it as the first token). Finish releases what is held.
//
// Added tokens pass through every step as their content, except ByteLevel, which inserts them
// as they are (bytes before one decode on their own).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata::tokenizer_internal {

// A token string on its way through the steps.
struct DecodeUnit {
  std::string text;
  bool added = false;  // an added token's content (only ByteLevel treats it differently)
};

// What one step keeps between tokens of one decode.
struct DecodeStepState {
  std::string held;   // text or bytes held back
  int64_t count = 0;  // tokens seen, or leading characters stripped
  bool done = false;  // a one-time effect has happened (Strip's start, ByteFallback's release)
};

// Mutable state of one decode (whole or streamed). Not thread-safe; one per decode.
struct DecodeState {
  std::vector<DecodeStepState> steps;
};

// One step of the decoder; immutable, its per-decode state lives in a DecodeStepState.
class DecoderStep {
 public:
  virtual ~DecoderStep() = default;
  // Takes one unit; appends the units it passes on.
  virtual void Push(DecodeStepState* state, DecodeUnit unit,
                    std::vector<DecodeUnit>* out) const = 0;
  // Appends what it still holds at the end of the decode.
  virtual void Finish(DecodeStepState* /*state*/, std::vector<DecodeUnit>* /*out*/) const {}
  // What the step makes of one token in the middle of a text.
  virtual std::string MapToken(std::string token) const { return token; }
};

// A parsed decoder: immutable and thread-safe; each decode keeps its own DecodeState.
class Decoder {
 public:
  // `j` is tokenizer.json's "decoder"; null joins the tokens with spaces, as `tokenizers` does
  // without a decoder. Sequences nest at most kMaxDepth deep.
  static absl::StatusOr<std::unique_ptr<Decoder>> FromJson(const nlohmann::json& j,
                                                           std::string_view origin);

  static constexpr int kMaxDepth = 16;

  DecodeState NewState() const;
  // Feeds one token string; appends the text that is final to `out` (whole UTF-8 characters).
  void Push(DecodeState* state, DecodeUnit unit, std::string* out) const;
  // Ends the decode: appends what was held back and resets `state` for a new decode.
  void Finish(DecodeState* state, std::string* out) const;

  // The bytes one vocab token contributes in the middle of a text: the steps' per-token
  // mappings without start-of-text effects (ByteFallback's byte, ByteLevel's bytes); may be a
  // partial UTF-8 sequence.
  std::string TokenBytes(std::string_view token) const;

 private:
  explicit Decoder(std::vector<std::unique_ptr<DecoderStep>> steps) : steps_(std::move(steps)) {}
  std::vector<std::unique_ptr<DecoderStep>> steps_;
};

}  // namespace strata::tokenizer_internal
