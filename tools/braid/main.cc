// braid: one command-line tool, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "braid/error.h"
#include "subcommands.h"

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: braid <command> [options]\n"
               "  run    start N ranks of a program:  braid run -n N -- PROGRAM ARGS\n"
               "  bench  collective benchmark:        braid bench -n N --op all_reduce\n"
               "  train  train a model:               braid train mlp|gpt [--dp N]\n"
               "  ps     parameter-server training:   braid ps train mlp --servers S --workers W\n"
               "  plan   the best layout on a cluster: braid plan --model gpt-175b --cluster dgx-h100 --gpus 1024 --batch 1536\n"
               "  data   write a data set to a file:  braid data click --out FILE\n"
               "  env    the BRAID_* settings in effect: braid env [--all] [--json]\n"
               "  doctor check this machine first:    braid doctor [--json]\n"
               "Run 'braid <command> --help' for the options of one command.\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  try {
    if (cmd == "run") return braid::tool::run_main(argc - 1, argv + 1);
    if (cmd == "bench") return braid::tool::bench_main(argc - 1, argv + 1);
    if (cmd == "train") return braid::tool::train_main(argc - 1, argv + 1);
    if (cmd == "env") return braid::tool::env_main(argc - 1, argv + 1);
    if (cmd == "ps") return braid::tool::ps_main(argc - 1, argv + 1);
    if (cmd == "plan") return braid::tool::plan_main(argc - 1, argv + 1);
    if (cmd == "data") return braid::tool::data_main(argc - 1, argv + 1);
    if (cmd == "doctor") return braid::tool::doctor_main(argc - 1, argv + 1);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "braid %s: error (%s): %s\n", cmd.c_str(), braid::errc_name(e.code()),
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "braid: unknown command '%s'\n", cmd.c_str());
  usage();
  return 2;
}
