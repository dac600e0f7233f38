#include "commands.h"
namespace strata::cli {
int RunGenerate(const Args&) { return 1; }
}  // namespace strata::cli
