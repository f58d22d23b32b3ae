// Entry points of the braid tool's subcommands, one file each.
#pragma once

namespace braid::tool {
int run_main(int argc, char** argv);    // run_cmd.cc:   braid run
int bench_main(int argc, char** argv);  // bench_cmd.cc: braid bench
int train_main(int argc, char** argv);  // train_cmd.cc: braid train
int env_main(int argc, char** argv);    // env_cmd.cc:   braid env
int doctor_main(int argc, char** argv); // doctor_cmd.cc: braid doctor (checks: doctor.h)
// train_dp.cc: braid train --dp N (and any rank of a launched job).
bool dp_requested(int argc, char** argv);
int train_dp_main(int argc, char** argv);
}  // namespace braid::tool
