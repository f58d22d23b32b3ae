// braid run: start N ranks of a program (see include/braid/launch.h).
//
//   braid run -n 4 -- ./train --epochs 3
//   # two nodes, same secret everywhere:
//   export BRAID_SECRET=$(openssl rand -hex 32)
//   node0$ braid run -n 8 --nnodes 2 --node-rank 0 --master node0:29400 -- ./train
//   node1$ braid run -n 8 --nnodes 2 --node-rank 1 --master node0:29400 -- ./train
#include <CLI/CLI.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "braid/launch.h"
#include "subcommands.h"

namespace braid::tool {

int run_main(int argc, char** argv) {
  CLI::App app{
      "Start N ranks of PROGRAM on this node and supervise them: each output line is prefixed "
      "with its rank, signals are forwarded, and when one rank fails the others are stopped.\n"
      "Multi-node: run once per node with the same -n, --nnodes and --master, a distinct "
      "--node-rank, and the same BRAID_SECRET exported on every node.",
      "braid run"};
  int n = 1;
  LaunchOptions opt;
  double timeout_s = 0, max_time_s = 0, grace_s = 3;
  std::vector<std::string> env;
  app.add_option("-n,--nproc-per-node", n, "ranks on this node")->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", opt.nnodes, "number of nodes")->check(CLI::Range(1, 65536));
  app.add_option("--node-rank", opt.node_rank, "this node's index, 0..nnodes-1")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master", opt.master,
                 "HOST:PORT of node 0's store (required with --nnodes > 1)");
  app.add_flag("--rank0-only", opt.rank0_only, "show only rank 0's stdout (stderr of all ranks)");
  app.add_option("--timeout", timeout_s,
                 "seconds: deadline of blocking operations in the ranks (BRAID_TIMEOUT) and for "
                 "the nodes to meet")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-time", max_time_s, "seconds: stop the job after this long (exit 124)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--env", env, "K=V to set in every rank (repeatable)");
  app.add_option("--max-restarts", opt.max_restarts,
                 "when a rank fails, restart the whole job up to N times (every node: give each "
                 "the same N); the ranks see BRAID_RESTART_COUNT, and `braid train --checkpoint` "
                 "resumes from it")
      ->check(CLI::NonNegativeNumber);
  app.prefix_command();
  app.footer("Usage: braid run -n N [options] -- PROGRAM [ARGS...]");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<std::string> cmd = app.remaining();
  if (!cmd.empty() && cmd[0] == "--") cmd.erase(cmd.begin());
  if (cmd.empty()) {
    std::fprintf(stderr, "braid run: no program given\n%s", app.help().c_str());
    return 2;
  }
  auto ms = [](double s) { return std::chrono::milliseconds(int64_t(std::llround(s * 1000))); };
  opt.timeout = ms(timeout_s);
  opt.max_time = ms(max_time_s);
  opt.grace = ms(grace_s);
  opt.extra_env = env;
  return launch_local(n, cmd, opt);
}

}  // namespace braid::tool
