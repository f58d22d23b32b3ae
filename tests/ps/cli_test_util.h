// Running `braid ps train` for the command-line tests of chains and deaths
// (ps_chain_cli_test.cc, ps_replace_cli_test.cc, ps_worker_death_cli_test.cc).
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

// Empty when an Open MPI mpirun can run here, else why not (make test
// installs it through scripts/deps.sh, so a missing one is a failure).
inline std::string mpirun_missing() {
  const CommandResult v = run_command("mpirun --version 2>&1");
  if (v.status != 0) return "no mpirun on PATH";
  if (v.out.find("Open MPI") == std::string::npos) return "mpirun is not Open MPI's: " + v.out;
  return "";
}

}  // namespace braid::testing::ps_cli
