#include <cstdio>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"
#include "tokenizer_bpe.h"
#include "tokenizer_text.h"

namespace strata::tokenizer_internal {
namespace {

using json = nlohmann::json;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

absl::Status ModelError(std::string_view origin, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(origin), ": model ", Sv(what)));
}

// A merge candidate: lowest rank first, then leftmost position.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator<(const Candidate& other) const {  // "lower priority than" for std::priority_queue
    if (rank != other.rank) return rank > other.rank;
    return pos > other.pos;
  }
};

// A doubly linked list node over the word's symbols.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

std::optional<std::pair<std::string, std::string>> SplitMerge(const json& m) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return std::nullopt;
    }
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& model, bool byte_level,
                                                             std::string_view origin) {
  if (!model.is_object()) return ModelError(origin, "is missing");
  std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    return ModelError(origin, absl::StrCat("type '", type, "' is unsupported (supported: BPE)"));
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  bpe->byte_level_ = byte_level;
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return ModelError(origin, "has no vocab object");
  }
  STRATA_RETURN_IF_ERROR(bpe->ParseVocab(model["vocab"], origin));
  STRATA_RETURN_IF_ERROR(bpe->ParseMerges(model.value("merges", json::array()), origin));
  STRATA_RETURN_IF_ERROR(bpe->ParseOptions(model, origin));
  return bpe;
}

absl::Status BpeModel::ParseVocab(const json& vocab, std::string_view origin) {
  const ByteAlphabet& alphabet = ByteAlphabet::Get();
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > (int64_t{1} << 30)) {
      return ModelError(origin, absl::StrCat("vocab entry '", token, "' has a bad id"));
    }
    int32_t id = id_json.get<int32_t>();
    vocab_[token] = id;
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(id + 1);
      has_id_.resize(id + 1, false);
    }
    id_to_token_[id] = token;
    has_id_[id] = true;
    if (std::optional<std::string> bytes = alphabet.Decode(token)) bytes_vocab_[*bytes] = id;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::ParseMerges(const json& merges, std::string_view origin) {
  if (!merges.is_array()) return ModelError(origin, "merges is not a list");
  int32_t rank = 0;
  for (const json& m : merges) {
    std::optional<std::pair<std::string, std::string>> pair = SplitMerge(m);
    if (!pair) {
      return ModelError(origin, absl::StrCat("merge #", rank, " is neither \"a b\" nor [a, b]"));
    }
    auto left = vocab_.find(pair->first);
    auto right = vocab_.find(pair->second);
    auto merged = vocab_.find(pair->first + pair->second);
    if (left == vocab_.end() || right == vocab_.end() || merged == vocab_.end()) {
      return ModelError(origin, absl::StrCat("merge #", rank, " (", pair->first, " ", pair->second,
                                             ") uses a token not in the vocab"));
    }
    // A repeated pair keeps its last rank, as in `tokenizers`.
    merges_[PairKey(left->second, right->second)] = Merge{rank, merged->second};
    ++rank;
  }
  return absl::OkStatus();
}

absl::Status BpeModel::ParseOptions(const json& model, std::string_view origin) {
  auto set_and_nonempty = [&](const char* key) {
    auto it = model.find(key);
    return it != model.end() && !it->is_null() &&
           !(it->is_string() && it->get<std::string>().empty());
  };
  if (set_and_nonempty("continuing_subword_prefix") || set_and_nonempty("end_of_word_suffix")) {
    return ModelError(origin, "continuing_subword_prefix/end_of_word_suffix are unsupported");
  }
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return ModelError(origin, "dropout is unsupported (encoding would not be deterministic)");
  }
  auto unk = model.find("unk_token");
  if (unk != model.end() && unk->is_string()) {
    auto it = vocab_.find(unk->get<std::string>());
    if (it == vocab_.end()) return ModelError(origin, "unk_token is not in the vocab");
    unk_id_ = it->second;
  }
  fuse_unk_ = model.value("fuse_unk", false);
  ignore_merges_ = model.value("ignore_merges", false);
  byte_fallback_ = model.value("byte_fallback", false);
  if (byte_level_) InitByteStarts();
  return absl::OkStatus();
}

BpeModel::ByteStart BpeModel::CharStart(std::string_view ch) const {
  ByteStart start;
  if (auto it = vocab_.find(Sv(ch)); it != vocab_.end()) {
    start.ids = {it->second};
    return start;
  }
  // Byte fallback spells the character's UTF-8 bytes as <0xXX> tokens, if all exist.
  for (size_t i = 0; byte_fallback_ && i < ch.size(); ++i) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<uint8_t>(ch[i]));
    auto it = vocab_.find(name);
    if (it == vocab_.end()) break;
    start.ids.push_back(it->second);
  }
  start.fallback = byte_fallback_ && start.ids.size() == ch.size();
  if (!start.fallback) {
    start.ids.clear();
    start.unknown = true;
  }
  return start;
}

void BpeModel::InitByteStarts() {
  const ByteAlphabet& alphabet = ByteAlphabet::Get();
  for (int b = 0; b < 256; ++b)
    byte_starts_[b] = CharStart(alphabet.Utf8Of(static_cast<uint8_t>(b)));
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(Sv(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<int32_t>* ids) const {
  // Unknown symbols become unk_token (consecutive ones fused when fuse_unk), or vanish without
  // one; a pending unk is emitted before the next symbol found in the vocab (not before byte
  // fallback tokens), as in `tokenizers`.
  bool pending_unk = false;
  auto add = [&](const ByteStart& start) {
    if (start.unknown) {
      if (!unk_id_) return;
      if (pending_unk && !fuse_unk_) ids->push_back(*unk_id_);
      pending_unk = true;
      return;
    }
    if (pending_unk && !start.fallback) {
      ids->push_back(*unk_id_);
      pending_unk = false;
    }
    ids->insert(ids->end(), start.ids.begin(), start.ids.end());
  };
  if (byte_level_) {
    for (char ch : piece) add(byte_starts_[static_cast<uint8_t>(ch)]);
  } else {
    ForEachChar(piece,
                [&](char32_t, size_t pos, size_t len) { add(CharStart(piece.substr(pos, len))); });
  }
  if (pending_unk) ids->push_back(*unk_id_);
}

void BpeModel::MergeAll(std::vector<int32_t>* ids) const {
  const int32_t n = static_cast<int32_t>(ids->size());
  std::vector<Symbol> symbols(n);
  std::vector<Candidate> storage;
  storage.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = Symbol{(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    if (i + 1 < n) {
      if (const Merge* m = FindMerge((*ids)[i], (*ids)[i + 1])) {
        storage.push_back({m->rank, i, m->new_id});
      }
    }
  }
  std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Symbol& right = symbols[cur.next];
    // Skip stale entries: the pair here changed since this candidate was queued.
    const Merge* now = FindMerge(cur.id, right.id);
    if (now == nullptr || now->new_id != top.new_id) continue;
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) symbols[cur.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* m = FindMerge(symbols[cur.prev].id, cur.id)) {
        queue.push({m->rank, cur.prev, m->new_id});
      }
    }
    if (cur.next >= 0) {
      if (const Merge* m = FindMerge(cur.id, symbols[cur.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
  ids->clear();
  for (const Symbol& s : symbols) {
    if (s.alive) ids->push_back(s.id);
  }
}

void BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const auto& whole = byte_level_ ? bytes_vocab_ : vocab_;
    if (auto it = whole.find(Sv(piece)); it != whole.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  InitialSymbols(piece, &ids);
  if (ids.size() > 1) MergeAll(&ids);
  out->insert(out->end(), ids.begin(), ids.end());
}

}  // namespace strata::tokenizer_internal
