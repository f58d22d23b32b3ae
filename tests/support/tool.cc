#include "support/tool.h"

#include "braid/env.h"

namespace braid::testing {
std::string braid_bin() { return env_str("BRAID_BIN").value_or(BRAID_BIN_DEFAULT); }
}  // namespace braid::testing
