#pragma once
// `strata up`: runs a whole cluster (router + prefill/decode/mixed workers) as separate processes
// of this binary on one machine and supervises it until SIGINT/SIGTERM. See supervisor.h.
#include "commands.h"

namespace strata::cli {

int RunUp(const Args& args);

}  // namespace strata::cli
