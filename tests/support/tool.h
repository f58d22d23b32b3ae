// The braid tool under test: BRAID_BIN (set by CTest) or, when a test binary
// is run by hand, the path CMake compiled in. Never empty, so tests that run
// the tool never skip.
#pragma once

#include <string>

namespace braid::testing {
std::string braid_bin();
}  // namespace braid::testing
