#pragma once
// Why a generation ended, as the engine records it and the APIs report it.
namespace strata {

enum class FinishReason { kNone, kLength, kStop, kAbort };
const char* FinishReasonName(FinishReason reason);  // "length", "stop", "abort"; kNone: ""

}  // namespace strata
