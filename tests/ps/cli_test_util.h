// Running `braid ps train` for the command-line tests of chains
// (ps_chain_cli_test.cc, ps_replace_cli_test.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/tool.h"

namespace braid::testing::ps_cli {

struct Job {
  CommandResult r;
  std::vector<nlohmann::json> log;  // the JSON log, when the job succeeded
  std::string ckpt;                 // its final weights (--checkpoint)
};

// Runs `command` (the tool and its arguments) with a JSON log and final
// weights under `dir`, named `name`.
inline Job run_job(const std::string& dir, const std::string& name, const std::string& command) {
  Job out;
  out.ckpt = dir + "/" + name + ".ckpt";
  out.r = run_command(command + " --json-log " + dir + "/" + name + ".jsonl" + " --checkpoint " +
                      out.ckpt + " 2>&1");
  if (out.r.status == 0) out.log = read_json_lines(dir + "/" + name + ".jsonl");
  return out;
}

}  // namespace braid::testing::ps_cli
