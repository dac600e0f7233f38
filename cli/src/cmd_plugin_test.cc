// placeholder: implemented in progress
#include "commands.h"
namespace strata::cli {
int RunPluginTest(const Args&) { return Fail("plugin-test", "not built yet", 1); }
}  // namespace strata::cli
