#include "tokenizer_text.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "strata/common/status_macros.h"
#include "tokenizer_pre.h"

namespace strata::tokenizer_internal {
namespace {

using json = nlohmann::json;

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// For a lead byte: the sequence width and the allowed range of the second byte (the Unicode
// table of well-formed sequences). Width 0 means "never valid as a lead".
struct LeadInfo {
  int width;
  uint8_t lo;
  uint8_t hi;
};

LeadInfo InfoForLead(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of leading bytes of `s` that form a valid (possibly incomplete) prefix of the sequence
// started by s[0]; s[0] must be a valid lead byte.
size_t ValidPrefixLength(std::string_view s, const LeadInfo& info) {
  size_t n = 1;
  while (n < s.size() && n < static_cast<size_t>(info.width)) {
    uint8_t b = static_cast<uint8_t>(s[n]);
    bool ok = n == 1 ? (b >= info.lo && b <= info.hi) : IsContinuation(b);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

std::optional<char32_t> DecodeUtf8(std::string_view s, size_t* len) {
  if (s.empty()) {
    *len = 0;
    return std::nullopt;
  }
  uint8_t b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  LeadInfo info = InfoForLead(b0);
  if (info.width == 0) {
    *len = 1;
    return std::nullopt;
  }
  size_t n = ValidPrefixLength(s, info);
  *len = n;
  if (n < static_cast<size_t>(info.width)) return std::nullopt;
  static constexpr uint8_t kLeadMask[5] = {0, 0, 0x1F, 0x0F, 0x07};
  char32_t c = b0 & kLeadMask[info.width];
  for (size_t i = 1; i < n; ++i) c = (c << 6) | (static_cast<uint8_t>(s[i]) & 0x3F);
  return c;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t len = 0;
    std::optional<char32_t> c = DecodeUtf8(bytes.substr(pos), &len);
    if (c.has_value()) {
      out.append(bytes.substr(pos, len));
    } else {
      AppendUtf8(kReplacementChar, &out);
    }
    pos += len;
  }
  return out;
}

bool IsValidUtf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<uint8_t>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = 0;
    if (!DecodeUtf8(bytes.substr(pos), &len)) return false;
    pos += len;
  }
  return true;
}

size_t DecodablePrefixLength(std::string_view bytes) {
  // A pending sequence starts at one of the last three bytes with a lead byte; continuation
  // bytes can never start a sequence, so everything before it decodes the same either way.
  size_t n = bytes.size();
  size_t lookback = n < 3 ? n : 3;
  for (size_t back = 1; back <= lookback; ++back) {
    size_t start = n - back;
    uint8_t b = static_cast<uint8_t>(bytes[start]);
    if (IsContinuation(b)) continue;
    LeadInfo info = InfoForLead(b);
    if (info.width == 0) return n;
    std::string_view tail = bytes.substr(start);
    bool incomplete =
        back < static_cast<size_t>(info.width) && ValidPrefixLength(tail, info) == tail.size();
    return incomplete ? start : n;
  }
  return n;
}

bool IsWhitespace(char32_t c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }

bool IsWordChar(char32_t c) {
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  int32_t mask = U_GET_GC_MASK(c);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

const ByteAlphabet& ByteAlphabet::Get() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

ByteAlphabet::ByteAlphabet() {
  // Printable Latin-1 bytes stand for themselves; the rest are shifted to U+0100 and up, in
  // byte order.
  char_to_byte_.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_to_char_[b] = printable ? static_cast<char32_t>(b) : next++;
    AppendUtf8(byte_to_char_[b], &byte_utf8_[b]);
    char_to_byte_[byte_to_char_[b]] = static_cast<int16_t>(b);
  }
}

int ByteAlphabet::ByteOf(char32_t c) const {
  return c < char_to_byte_.size() ? char_to_byte_[c] : -1;
}

std::string ByteAlphabet::Encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out.append(byte_utf8_[static_cast<uint8_t>(ch)]);
  return out;
}

std::optional<std::string> ByteAlphabet::Decode(std::string_view token) const {
  std::string out;
  bool ok = true;
  ForEachChar(token, [&](char32_t c, size_t, size_t) {
    int b = ByteOf(c);
    if (b < 0) {
      ok = false;
    } else {
      out.push_back(static_cast<char>(b));
    }
  });
  if (!ok) return std::nullopt;
  return out;
}

namespace {

class IcuNormalizer : public Normalizer {
 public:
  explicit IcuNormalizer(const icu::Normalizer2* impl) : impl_(impl) {}
  std::string Normalize(std::string_view text) const override {
    UErrorCode status = U_ZERO_ERROR;
    icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
    if (impl_->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    status = U_ZERO_ERROR;
    impl_->normalizeUTF8(0, piece, sink, nullptr, status);
    // Only allocation failure can fail here (the input is valid UTF-8); keep the text as is.
    return U_SUCCESS(status) ? out : std::string(text);
  }

 private:
  const icu::Normalizer2* impl_;  // owned by ICU, lives for the process
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string Normalize(std::string_view text) const override {
    std::string current(text);
    for (const auto& step : steps_) current = step->Normalize(current);
    return current;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Replaces every match of a literal or regex pattern.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string Normalize(std::string_view text) const override {
    return pattern_.ReplaceAll(text, content_);
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

// Puts a fixed string before any non-empty text.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string_view text) const override {
    if (text.empty()) return std::string();
    return absl::StrCat(prefix_, Sv(text));
  }

 private:
  std::string prefix_;
};

absl::StatusOr<const icu::Normalizer2*> IcuInstance(const std::string& type) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* impl = nullptr;
  if (type == "NFC") impl = icu::Normalizer2::getNFCInstance(status);
  if (type == "NFD") impl = icu::Normalizer2::getNFDInstance(status);
  if (type == "NFKC") impl = icu::Normalizer2::getNFKCInstance(status);
  if (type == "NFKD") impl = icu::Normalizer2::getNFKDInstance(status);
  if (impl == nullptr || U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat("ICU normalizer ", type, ": ", u_errorName(status)));
  }
  return impl;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const json& j,
                                                                 std::string_view origin) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": normalizer without a type"));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    STRATA_ASSIGN_OR_RETURN(const icu::Normalizer2* impl, IcuInstance(type));
    return std::make_unique<IcuNormalizer>(impl);
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(origin), ": normalizer Sequence without a normalizers list"));
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const json& step : j["normalizers"]) {
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> n, FromJson(step, origin));
      steps.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Replace") {
    absl::StatusOr<TextPattern> pattern =
        TextPattern::FromJson(j.value("pattern", json()), "normalizer Replace");
    if (!pattern.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": ", pattern.status().message()));
    }
    if (!j.contains("content") || !j["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(origin), ": normalizer Replace without a content string"));
    }
    return std::make_unique<ReplaceNormalizer>(std::move(*pattern),
                                               j["content"].get<std::string>());
  }
  if (type == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(origin), ": normalizer Prepend without a prepend string"));
    }
    return std::make_unique<PrependNormalizer>(j["prepend"].get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(origin), ": unsupported normalizer '", type,
                   "' (supported: NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence)"));
}

}  // namespace strata::tokenizer_internal
