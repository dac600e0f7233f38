#pragma once
// Text helpers shared by the tokenizer's pieces: UTF-8 handling with the exact replacement rules
// of Rust's String::from_utf8_lossy (what Hugging Face `tokenizers` uses), the GPT-2 byte-level
// alphabet, Unicode properties that Rust's `char` methods use (via ICU), and normalizers.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace strata::tokenizer_internal {

// This Abseil's string_view is its own type; StrCat and heterogeneous lookups need it.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes one UTF-8 character at the start of `s` if it is complete and valid; returns its code
// point and sets *len, or returns nullopt and sets *len to the length of the maximal invalid
// subpart (at least 1 unless `s` is empty), the unit that one U+FFFD replaces.
std::optional<char32_t> DecodeUtf8(std::string_view s, size_t* len);

void AppendUtf8(char32_t c, std::string* out);

// Like Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

bool IsValidUtf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that can be decoded now without guessing: everything
// except a trailing valid-but-incomplete UTF-8 sequence (which more bytes may still complete).
size_t DecodablePrefixLength(std::string_view bytes);

// Calls fn(code_point, byte_offset, byte_len) for each character of valid UTF-8 `s`.
template <typename Fn>
void ForEachChar(std::string_view s, Fn fn) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t len = 0;
    std::optional<char32_t> c = DecodeUtf8(s.substr(pos), &len);
    fn(c.value_or(kReplacementChar), pos, len);
    pos += len;
  }
}

// Rust's char::is_whitespace (Unicode White_Space).
bool IsWhitespace(char32_t c);
// The regex crate's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation and
// Join_Control.
bool IsWordChar(char32_t c);

// GPT-2's reversible byte <-> printable character mapping used by ByteLevel.
class ByteAlphabet {
 public:
  static const ByteAlphabet& Get();
  char32_t CharOf(uint8_t byte) const { return byte_to_char_[byte]; }
  // UTF-8 of CharOf(byte).
  const std::string& Utf8Of(uint8_t byte) const { return byte_utf8_[byte]; }
  // The byte a character stands for, or -1 when it is not in the alphabet.
  int ByteOf(char32_t c) const;
  // Maps every byte of `bytes` to its character (the form vocab strings use).
  std::string Encode(std::string_view bytes) const;
  // Inverse of Encode; nullopt when some character is outside the alphabet.
  std::optional<std::string> Decode(std::string_view token) const;

 private:
  ByteAlphabet();
  std::array<char32_t, 256> byte_to_char_;
  std::array<std::string, 256> byte_utf8_;
  // Every character of the alphabet is below U+0144 (256 + 68 shifted bytes).
  std::array<int16_t, 0x144> char_to_byte_;
};

// A tokenizer.json normalizer: Unicode normalization forms, Replace (literal or regex), Prepend,
// and Sequences of them.
class Normalizer {
 public:
  // `origin` names the file in error messages.
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(const nlohmann::json& j,
                                                              std::string_view origin);
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8.
  virtual std::string Normalize(std::string_view text) const = 0;
};

}  // namespace strata::tokenizer_internal
