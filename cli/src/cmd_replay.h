#pragma once
// `strata replay`: open-loop replay of a request trace against an OpenAI-compatible server,
// with TTFT/TPOT percentiles, SLO attainment, goodput, JSON/CSV results and SVG plots; and
// `--find-goodput`, the highest rate that keeps >= 90% attainment. See docs/replay.md.
#include "commands.h"

namespace strata::cli {

int RunReplay(const Args& args);

}  // namespace strata::cli
