#include "commands.h"
namespace strata::cli {
int RunModel(const Args&) { return 1; }
}  // namespace strata::cli
