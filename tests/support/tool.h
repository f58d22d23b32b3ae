// The braid tool under test: BRAID_BIN (set by CTest) or, when a test binary
// is run by hand, the path CMake compiled in. Never empty, so tests that run
// the tool never skip.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace braid::testing {
std::string braid_bin();

// Runs `cmd` through /bin/sh and waits for it: its exit status (128 + the
// signal when killed) and its stdout and stderr together.
struct CommandResult {
  int status = -1;
  std::string out;
};
CommandResult run_command(const std::string& cmd);

// The JSON objects of a JSON-lines file (a --json-log), blank lines skipped.
std::vector<nlohmann::json> read_json_lines(const std::string& path);
// The same, of text (a command's --json output).
std::vector<nlohmann::json> parse_json_lines(const std::string& text);

// gtest expectations that two `braid train` JSON logs (step records, then
// the done record) hold the same number of records, every step's loss
// within 1e-5 relative and the same final loss.
void expect_same_losses(const std::vector<nlohmann::json>& a,
                        const std::vector<nlohmann::json>& b, const std::string& what);
}  // namespace braid::testing
