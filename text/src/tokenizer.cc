#include "strata/text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/common/json_limits.h"
#include "strata/common/status_macros.h"
#include "tokenizer_added.h"
#include "tokenizer_bpe.h"
#include "tokenizer_decoder.h"
#include "tokenizer_pre.h"
#include "tokenizer_text.h"

namespace strata {
namespace {

using json = nlohmann::json;
using tokenizer_internal::AddedToken;
using tokenizer_internal::AddedTokenMatcher;
using tokenizer_internal::BpeModel;
using tokenizer_internal::Decoder;
using tokenizer_internal::DecodeState;
using tokenizer_internal::DecodeUnit;
using tokenizer_internal::Normalizer;
using tokenizer_internal::PreTokenizer;
using tokenizer_internal::Sv;
using tokenizer_internal::TextSegment;
using tokenizer_internal::Utf8Lossy;

// Real tokenizer.json files are a few MB (tens for the largest vocabularies) and nest about
// six levels.
constexpr size_t kMaxJsonBytes = size_t{512} << 20;
constexpr int kMaxTokenizerJsonDepth = 64;

absl::Status Invalid(std::string_view origin, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": ", Sv(what)));
}

// The ids a post-processor puts around a single sequence (pairs are never encoded here).
struct Wrapping {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

absl::StatusOr<std::vector<int32_t>> TemplateTokenIds(const json& processor,
                                                      const std::string& name,
                                                      std::string_view origin) {
  const json specials = processor.value("special_tokens", json::object());
  if (!specials.contains(name) || !specials[name].contains("ids") ||
      !specials[name]["ids"].is_array()) {
    return Invalid(origin, absl::StrCat("TemplateProcessing: special token '", name,
                                        "' is not in special_tokens"));
  }
  return specials[name]["ids"].get<std::vector<int32_t>>();
}

absl::StatusOr<Wrapping> ParseTemplate(const json& processor, std::string_view origin) {
  const json single = processor.value("single", json());
  if (!single.is_array()) return Invalid(origin, "TemplateProcessing without a single template");
  Wrapping wrapping;
  int sequences = 0;
  for (const json& piece : single) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string()) != "A") {
        return Invalid(origin, "TemplateProcessing: single template may only use sequence A");
      }
      ++sequences;
      continue;
    }
    if (!piece.contains("SpecialToken")) {
      return Invalid(origin, "TemplateProcessing: unknown template piece");
    }
    STRATA_ASSIGN_OR_RETURN(
        std::vector<int32_t> ids,
        TemplateTokenIds(processor, piece["SpecialToken"].value("id", std::string()), origin));
    std::vector<int32_t>& target = sequences == 0 ? wrapping.prefix : wrapping.suffix;
    target.insert(target.end(), ids.begin(), ids.end());
  }
  if (sequences != 1) return Invalid(origin, "TemplateProcessing: single needs exactly one $A");
  return wrapping;
}

// [cls, id] / [sep, id] pairs of Roberta/BertProcessing.
absl::StatusOr<int32_t> PairId(const json& processor, const char* key, std::string_view origin) {
  const json pair = processor.value(key, json());
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) {
    return Invalid(origin, absl::StrCat("post_processor: bad '", key, "'"));
  }
  return pair[1].get<int32_t>();
}

// Composes `j` into `wrapping` (a later processor wraps the result of an earlier one).
absl::Status ParsePostProcessor(const json& j, std::string_view origin, Wrapping* wrapping) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = j.value("type", std::string());
  Wrapping outer;
  if (type == "ByteLevel") return absl::OkStatus();  // only adjusts offsets
  if (type == "Sequence") {
    for (const json& step : j.value("processors", json::array())) {
      STRATA_RETURN_IF_ERROR(ParsePostProcessor(step, origin, wrapping));
    }
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    STRATA_ASSIGN_OR_RETURN(outer, ParseTemplate(j, origin));
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    STRATA_ASSIGN_OR_RETURN(int32_t cls, PairId(j, "cls", origin));
    STRATA_ASSIGN_OR_RETURN(int32_t sep, PairId(j, "sep", origin));
    outer = Wrapping{{cls}, {sep}};
  } else {
    return Invalid(origin, absl::StrCat("post_processor '", type,
                                        "' is unsupported (supported: TemplateProcessing, "
                                        "ByteLevel, RobertaProcessing, BertProcessing, Sequence)"));
  }
  outer.prefix.insert(outer.prefix.end(), wrapping->prefix.begin(), wrapping->prefix.end());
  wrapping->suffix.insert(wrapping->suffix.end(), outer.suffix.begin(), outer.suffix.end());
  wrapping->prefix = std::move(outer.prefix);
  return absl::OkStatus();
}

absl::StatusOr<AddedToken> ParseAddedToken(const json& j, std::string_view origin) {
  if (!j.is_object() || !j.contains("id") || !j["id"].is_number_integer() || j["id"] < 0 ||
      !j.contains("content") || !j["content"].is_string()) {
    return Invalid(origin, "added_tokens entry without an id and content");
  }
  AddedToken token;
  token.id = j["id"].get<int32_t>();
  token.content = j["content"].get<std::string>();
  token.special = j.value("special", false);
  token.single_word = j.value("single_word", false);
  token.lstrip = j.value("lstrip", false);
  token.rstrip = j.value("rstrip", false);
  token.normalized = j.value("normalized", !token.special);
  return token;
}

class HfTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const json& root,
                                                           std::string_view origin);

  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string TokenBytes(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  std::optional<std::string> IdToToken(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;
  bool IsAddedToken(int32_t id) const override { return FindAdded(id) != nullptr; }
  std::unique_ptr<DecodeStream> NewDecodeStream(bool skip_special_tokens) const override;

  // The decoder's input for `id`; false when the id is skipped (unknown, or special while
  // skipping them).
  bool DecodeInput(int32_t id, bool skip_special_tokens, DecodeUnit* unit) const;
  const Decoder& decoder() const { return *decoder_; }

 private:
  HfTokenizer() = default;
  absl::Status LoadAddedTokens(const json& list, std::string_view origin);
  void EncodeText(std::string_view text, bool at_input_start, std::vector<int32_t>* ids) const;
  const AddedToken* FindAdded(int32_t id) const;
  const std::string& AddedText(const AddedToken* token) const {
    return decoded_[token - added_.data()];
  }

  std::unique_ptr<Normalizer> normalizer_;  // null: none
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  Wrapping wrapping_;
  std::vector<AddedToken> added_;
  std::vector<std::string> decoded_;  // per added_ entry: the text it decodes to
  absl::flat_hash_map<int32_t, size_t> added_by_id_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_;         // tokens with normalized=false, on the input
  AddedTokenMatcher normalized_matcher_;  // tokens with normalized=true, on normalized text
  std::vector<std::string> token_bytes_;  // per model id, Decoder::TokenBytes
  int32_t vocab_size_ = 0;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> HfTokenizer::Create(const json& root,
                                                               std::string_view origin) {
  if (!root.is_object()) return Invalid(origin, "tokenizer.json is not a JSON object");
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  STRATA_ASSIGN_OR_RETURN(tok->pre_tokenizer_,
                          PreTokenizer::FromJson(root.value("pre_tokenizer", json()), origin));
  STRATA_ASSIGN_OR_RETURN(
      tok->model_,
      BpeModel::FromJson(root.value("model", json()), tok->pre_tokenizer_->byte_level(), origin));
  const json normalizer = root.value("normalizer", json());
  if (!normalizer.is_null()) {
    STRATA_ASSIGN_OR_RETURN(tok->normalizer_, Normalizer::FromJson(normalizer, origin));
  }
  STRATA_RETURN_IF_ERROR(
      ParsePostProcessor(root.value("post_processor", json()), origin, &tok->wrapping_));
  STRATA_ASSIGN_OR_RETURN(tok->decoder_, Decoder::FromJson(root.value("decoder", json()), origin));
  STRATA_RETURN_IF_ERROR(tok->LoadAddedTokens(root.value("added_tokens", json::array()), origin));

  tok->token_bytes_.resize(tok->model_->max_id() + 1);
  for (int32_t id = 0; id <= tok->model_->max_id(); ++id) {
    if (const std::string* token = tok->model_->IdToToken(id)) {
      tok->token_bytes_[id] = tok->decoder_->TokenBytes(*token);
    }
  }
  tok->vocab_size_ = tok->model_->max_id() + 1;
  for (const AddedToken& t : tok->added_) tok->vocab_size_ = std::max(tok->vocab_size_, t.id + 1);
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

absl::Status HfTokenizer::LoadAddedTokens(const json& list, std::string_view origin) {
  if (!list.is_array()) return Invalid(origin, "added_tokens is not a list");
  for (const json& entry : list) {
    STRATA_ASSIGN_OR_RETURN(AddedToken token, ParseAddedToken(entry, origin));
    added_by_id_[token.id] = added_.size();
    added_by_content_.emplace(token.content, token.id);
    // `tokenizers` maps the id of a normalized token back to its normalized content.
    decoded_.push_back(token.normalized && normalizer_ ? normalizer_->Normalize(token.content)
                                                       : token.content);
    added_.push_back(std::move(token));
  }
  // `tokenizers` matches special tokens before other added ones (it matters for duplicates).
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (bool special : {true, false}) {
    for (const AddedToken& t : added_) {
      if (t.special != special) continue;
      if (t.normalized) {
        normalized.push_back(t);
        normalized_patterns.push_back(normalizer_ ? normalizer_->Normalize(t.content) : t.content);
      } else {
        raw.push_back(t);
        raw_patterns.push_back(t.content);
      }
    }
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));
  return absl::OkStatus();
}

// Pre-tokenizes and BPE-encodes text that holds no added tokens.
void HfTokenizer::EncodeText(std::string_view text, bool at_input_start,
                             std::vector<int32_t>* ids) const {
  std::vector<std::string> pieces;
  pre_tokenizer_->Run(text, at_input_start, &pieces);
  for (const std::string& piece : pieces) model_->Tokenize(piece, ids);
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string sanitized;
  if (!tokenizer_internal::IsValidUtf8(text)) {
    sanitized = Utf8Lossy(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = wrapping_.prefix;
  for (const TextSegment& segment : raw_matcher_.Split(text)) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    if (segment.text.empty()) continue;
    const std::string normalized =
        normalizer_ ? normalizer_->Normalize(segment.text) : std::string(segment.text);
    const bool segment_at_start = segment.text.data() == text.data();
    for (const TextSegment& inner : normalized_matcher_.Split(normalized)) {
      if (inner.id >= 0) {
        ids.push_back(inner.id);
      } else if (!inner.text.empty()) {
        EncodeText(inner.text, segment_at_start && inner.text.data() == normalized.data(), &ids);
      }
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), wrapping_.suffix.begin(), wrapping_.suffix.end());
  }
  return ids;
}

bool HfTokenizer::DecodeInput(int32_t id, bool skip_special_tokens, DecodeUnit* unit) const {
  if (const AddedToken* added = FindAdded(id)) {
    if (skip_special_tokens && added->special) return false;
    *unit = DecodeUnit{AddedText(added), true};
    return true;
  }
  if (const std::string* token = model_->IdToToken(id)) {
    *unit = DecodeUnit{*token, false};
    return true;
  }
  return false;
}

std::string HfTokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text;
  DecodeState state = decoder_->NewState();
  DecodeUnit unit;
  for (int32_t id : ids) {
    if (DecodeInput(id, skip_special_tokens, &unit)) decoder_->Push(&state, std::move(unit), &text);
  }
  decoder_->Finish(&state, &text);
  return text;
}

// Decode, one id at a time: the same decoder steps with their state kept between calls.
class HfDecodeStream : public Tokenizer::DecodeStream {
 public:
  HfDecodeStream(const HfTokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer),
        skip_special_(skip_special_tokens),
        state_(tokenizer->decoder().NewState()) {}
  std::string Push(int32_t id) override {
    std::string text;
    DecodeUnit unit;
    if (tokenizer_->DecodeInput(id, skip_special_, &unit)) {
      tokenizer_->decoder().Push(&state_, std::move(unit), &text);
    }
    return text;
  }
  std::string Flush() override {
    std::string text;
    tokenizer_->decoder().Finish(&state_, &text);
    return text;
  }

 private:
  const HfTokenizer* tokenizer_;
  bool skip_special_;
  DecodeState state_;
};

std::unique_ptr<Tokenizer::DecodeStream> HfTokenizer::NewDecodeStream(
    bool skip_special_tokens) const {
  return std::make_unique<HfDecodeStream>(this, skip_special_tokens);
}

const AddedToken* HfTokenizer::FindAdded(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_[it->second];
}

std::string HfTokenizer::TokenBytes(int32_t id) const {
  if (const AddedToken* added = FindAdded(id)) return AddedText(added);
  if (id >= 0 && static_cast<size_t>(id) < token_bytes_.size()) return token_bytes_[id];
  return "";
}

std::optional<int32_t> HfTokenizer::TokenToId(std::string_view token) const {
  auto it = added_by_content_.find(Sv(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->TokenToId(token);
}

std::optional<std::string> HfTokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = FindAdded(id)) return AddedText(added);
  if (const std::string* token = model_->IdToToken(id)) return *token;
  return std::nullopt;
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = FindAdded(id);
  return added != nullptr && added->special;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && size > kMaxJsonBytes) {
    return Invalid(path, absl::StrCat("tokenizer.json is larger than ", kMaxJsonBytes, " bytes"));
  }
  STRATA_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
  return FromJson(contents, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                               std::string_view origin) {
  if (json_text.size() > kMaxJsonBytes) {
    return Invalid(origin, absl::StrCat("tokenizer.json is larger than ", kMaxJsonBytes, " bytes"));
  }
  // tokenizer.json nests a few levels; deeper input is refused before it is parsed.
  if (absl::Status depth = CheckJsonDepth(json_text, kMaxTokenizerJsonDepth); !depth.ok()) {
    return Invalid(origin, std::string(depth.message()));
  }
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Invalid(origin, "malformed JSON");
  try {
    return HfTokenizer::Create(root, origin);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type somewhere the checks above do not look.
    return Invalid(origin, absl::StrCat("bad tokenizer.json: ", e.what()));
  }
}

}  // namespace strata
