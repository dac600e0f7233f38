#include "strata/types/finish_reason.h"

namespace strata {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      return "";
  }
  return "";
}

}  // namespace strata
