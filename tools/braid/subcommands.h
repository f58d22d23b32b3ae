// Entry points of the braid tool's subcommands, one file each.
#pragma once

#include <string>

namespace braid {
class Communicator;
}

namespace braid::tool {
int run_main(int argc, char** argv);    // run_cmd.cc:   braid run
int bench_main(int argc, char** argv);  // bench_cmd.cc: braid bench
// bench_probe.cc: braid bench --probe (ranks 0 and 1 measure their link;
// rank 0 writes the figures to `probe_out`, "" for the default tuning file).
int bench_probe(Communicator& comm, const std::string& probe_out);
int train_main(int argc, char** argv);  // train_cmd.cc: braid train
int env_main(int argc, char** argv);    // env_cmd.cc:   braid env
int doctor_main(int argc, char** argv); // doctor_cmd.cc: braid doctor (checks: doctor.h)
int ps_main(int argc, char** argv);     // ps_main.cc:   braid ps train
int plan_main(int argc, char** argv);   // plan_cmd.cc:  braid plan
int data_main(int argc, char** argv);   // data_cmd.cc:  braid data click
// train_dp.cc: braid train --dp N (and any rank of a launched job).
bool dp_requested(int argc, char** argv);
int train_dp_main(int argc, char** argv);
// train_mp.cc: braid train gpt --tp/--pp (any model-parallel flag).
bool mp_requested(int argc, char** argv);
bool auto_requested(int argc, char** argv);
int train_auto_main(int argc, char** argv);
int train_mp_main(int argc, char** argv);
// train_hybrid.cc: braid train dlrm --embeddings sharded / --table-optimizer.
bool hybrid_requested(int argc, char** argv);
int train_hybrid_main(int argc, char** argv);
}  // namespace braid::tool
