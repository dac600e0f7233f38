// Structured output in the engine: each guided request carries its constraint's automaton;
// before sampling, the logits of the tokens it does not allow are set to -inf (the token mask,
// cached per automaton state) on the host, or on the device when the plugin samples and has
// mask_logits; each appended token moves the automaton on.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "strata/engine/engine.h"

namespace strata {

std::shared_ptr<const grammar::TokenVocabulary> Engine::MaskVocabulary(const Tokenizer& tokenizer,
                                                                      int32_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  std::vector<bool> usable(static_cast<size_t>(vocab_size), false);
  for (int32_t id = 0; id < vocab_size && id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    bytes[id] = tokenizer.TokenBytes(id);
    usable[id] = true;
  }
  return grammar::TokenVocabulary::Create(std::move(bytes), usable);
}

absl::StatusOr<std::shared_ptr<grammar::TokenMasker>> Engine::PrepareGrammar(
    const GuidedDecoding& spec) const {
  absl::call_once(maskers_once_, [this] {
    maskers_ = std::make_unique<grammar::MaskerCache>(
        MaskVocabulary(*tokenizer_, config().vocab_size));
  });
  return maskers_->Get(spec);
}

absl::Status Engine::AttachGrammar(Request& r) {
  auto masker = PrepareGrammar(r.params.guided);
  if (!masker.ok()) return masker.status();
  r.grammar = *std::move(masker);
  r.grammar_state = r.grammar->grammar().start();
  return absl::OkStatus();
}

bool Engine::MaskGrammar(const Request& r, std::span<float> logits) const {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const auto mask = r.grammar->Mask(r.grammar_state);
  const bool accepting = r.grammar->grammar().IsAccepting(r.grammar_state);
  const size_t n = std::min(logits.size(), mask->size() * 32);
  bool any = false;
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t word = (*mask)[w];
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t t = w * 32; t < end; ++t) {
      if ((word >> (t & 31)) & 1u) {
        any = any || logits[t] != kNegInf;
      } else if (!accepting || !IsStopToken(r, static_cast<int32_t>(t))) {
        logits[t] = kNegInf;
      } else {
        any = any || logits[t] != kNegInf;
      }
    }
  }
  for (size_t t = n; t < logits.size(); ++t) logits[t] = kNegInf;
  return any;
}

bool Engine::DeviceMask(const Request& r, uint32_t* words) const {
  const size_t n = grammar::MaskWords(config().vocab_size);
  auto set_stops = [&](bool allowed) {
    ForEachStopToken(r, [&](int32_t t) {
      if (t < 0 || t >= config().vocab_size) return;
      if (allowed) {
        words[t >> 5] |= 1u << (t & 31);
      } else {
        words[t >> 5] &= ~(1u << (t & 31));
      }
    });
  };
  if (r.grammar != nullptr) {
    const auto mask = r.grammar->Mask(r.grammar_state);
    std::copy_n(mask->begin(), std::min(n, mask->size()), words);
    if (r.grammar->grammar().IsAccepting(r.grammar_state)) set_stops(true);
  } else {
    std::fill_n(words, n, ~0u);
  }
  if (BelowMinTokens(r)) set_stops(false);
  // Bits past the vocabulary are ignored by the device; they must not count as allowed here.
  if (const int tail = config().vocab_size & 31; tail != 0) words[n - 1] &= (1u << tail) - 1;
  return std::any_of(words, words + n, [](uint32_t w) { return w != 0; });
}

void Engine::EndUnspellable(Request* r, RequestOutput& out) {
  r->text += r->detok->Flush();
  r->stop_reason = "constraint";
  Finish(r, FinishReason::kStop);
  out.request_id = r->id;
  EmitText(r, out);
}

void Engine::AdvanceGrammar(Request& r, int32_t token) const {
  if (r.grammar_state == grammar::Grammar::kDead || IsStopToken(r, token)) return;
  r.grammar_state = r.grammar->Advance(r.grammar_state, token);
}

bool Engine::GrammarComplete(const Request& r) {
  if (r.grammar == nullptr) return false;
  // A dead state cannot arise from masked sampling; if a token from elsewhere (a resumed or
  // prefilled one) broke the constraint, the output ends where it is.
  if (r.grammar_state == grammar::Grammar::kDead) return true;
  const grammar::Grammar& g = r.grammar->grammar();
  return g.IsAccepting(r.grammar_state) && !g.CanContinue(r.grammar_state);
}

}  // namespace strata
