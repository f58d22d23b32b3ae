// Parameter-server checkpoints: each server's shard, saved at a round close.
//
// Directory layout (ServerOptions::save_dir = DIR):
//   DIR/step-<N>/shard-<s>.ckpt    shard s after N closed rounds
// one braid checkpoint file each (braid/checkpoint.h: atomic, CRC-guarded).
// A step directory is complete when it holds one file for every shard
// 0..S-1; servers write theirs independently, so a job stopped mid-save
// leaves an incomplete directory, which resuming skips.
//
// A shard file holds, for every key of the layout:
//   dense:  "dense/<name>/w" (the shard's slice), "dense/<name>/state" (the
//           update rule's slots, slot-major), meta "dense/<name>/range" =
//           "begin,end,size" and "dense/<name>/t" (updates applied);
//   sparse: "sparse/<name>/rows" (the row ids the shard has touched, each
//           int64 stored as its two i32 halves, [rows, 2]),
//           "sparse/<name>/w" [rows, width], "sparse/<name>/state"
//           [rows, width·slots], meta "sparse/<name>/rows" (the count),
//           "sparse/<name>/width" and "sparse/<name>/t";
// (a tensor of no elements is left out) and meta "ps/format" = "1",
// "ps/servers", "ps/shard", "ps/step" (closed rounds), "ps/rule",
// "ps/slots", "ps/keys", "ps/updates_applied", plus the job's own meta
// (ServerOptions::checkpoint_meta).
//
// What resumes: parameters, optimizer state and update counts (Adam's bias
// correction), and the round count: every worker's clock restarts at N. Not
// kept: pushes buffered for rounds after N (SSP) or folded late (k-of-n),
// which the workers recompute or which count as dropped; hot-key counts;
// traffic counters. Under BSP a resumed job therefore trains exactly as one
// that never stopped. ASP has no rounds: step N is saved once every worker
// has clocked it, holding whatever pushes of later steps the shard applied
// by then. A shard is saved by one server: its home server, or with chains
// (replicas >= 2) its chain's live head, so saves go on, complete, after a
// server's death (the step a death interrupts may lack that shard's file;
// resuming then takes an earlier complete step).
//
// Resuming needs the same keys (names, sizes) and the same update rule;
// anything else is Error(kInvalidArgument) naming the file and the
// difference. A damaged file is Error(kCorrupt) naming it. Worker count,
// placement and consistency may change, and so may the server count: with
// S' servers resuming S shards, each server reads every shard file and
// keeps what its own shard holds under S' (the dense slices' overlaps, the
// rows row_server gives it, their optimizer state), so the job trains as
// the saved one would have. A key's update count (Adam's bias correction)
// becomes the largest among the old shards: they are equal whenever every
// shard saw a push of that key in every round, as dense keys do.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace braid::ps {

// DIR/step-<N>, and a step directory's STEP_DIR/shard-<s>.ckpt.
std::string step_dir_path(const std::string& dir, int64_t step);
std::string shard_file(const std::string& step_dir, int shard);

// Where a job resumes.
struct ResumePoint {
  std::string step_dir;  // holds shard-<s>.ckpt for every s
  int servers = 0;       // the server count that saved it
  int64_t step = 0;      // rounds closed
  std::map<std::string, std::string> meta;  // shard 0's meta
};

// `path` is a step directory (it holds shard-0.ckpt) or a save_dir, whose
// newest complete step directory is taken: one holding shard-0..shard-(S-1)
// for the S servers its shard 0 says saved it. Reads shard 0's meta
// (verifying that file). Throws Error(kInvalidArgument) naming `path` when
// there is no complete checkpoint, kCorrupt / kIo as load_checkpoint.
ResumePoint find_resume_point(const std::string& path);

// The number of shard files in `step_dir` when they are shard-0..shard-(S-1);
// otherwise Error(kInvalidArgument) naming it.
int shard_files(const std::string& step_dir);

}  // namespace braid::ps
