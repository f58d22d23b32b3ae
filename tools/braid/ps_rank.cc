// braid ps train: one rank of the job (run_ps_rank): its server, its
// worker (ps_cmd.cc), or both.
//
// Processes: with --placement dedicated (default) the job has W + S ranks,
// ranks 0..W-1 workers and W..W+S-1 servers; with --placement colocated it
// has W ranks and workers 0..S-1 also run a server (S ≤ W; --servers 1 is
// "rank 0 as server"); --spare-servers N adds N dedicated ranks after the
// servers (ps_spare.h). Started plainly it forks them under
// launch::Supervisor, meeting through a private file store; under braid run
// / torchrun / mpirun / srun it joins the job (whose size must match).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "braid/checkpoint.h"
#include "braid/error.h"
#include "braid/ps.h"
#include "braid/log.h"
#include "braid/ps_checkpoint.h"
#include "braid/survivable.h"
#include "ps_faults.h"
#include "ps_spare.h"
#include "ps_train.h"
#include "train_setup.h"

namespace braid::tool {

namespace {

ps::ServerOptions server_options(const PsFlags& f, const TrainSetup& setup, int rank) {
  ps::ServerOptions o;
  o.rank = rank;
  o.workers = f.workers;
  o.consistency = ps::parse_consistency(f.consistency);
  o.staleness = f.staleness;
  o.round_k = f.round_k;
  o.replicas = f.replicas;
  o.late = f.late == "fold" ? ps::LatePolicy::kFold : ps::LatePolicy::kDrop;
  o.rule.kind = ps::parse_update_rule(f.rule.empty() ? f.optimizer : f.rule);
  o.rule.momentum = o.rule.kind == ps::UpdateRule::kSgd ? float(f.momentum) : 0.0f;
  o.rule.weight_decay = float(f.weight_decay);
  if (o.rule.kind == ps::UpdateRule::kAdagrad) o.rule.eps = 1e-10f;
  o.lr = setup.sched;
  o.timeout = std::chrono::milliseconds(int64_t(f.timeout_s * 1000));
  o.hot_keys = f.hot_keys;
  o.hot_max_rows = f.hot_max_rows;
  o.save_dir = f.save_dir;
  o.save_every = f.save_every;
  o.save_last = f.save_dir.empty() ? 0 : setup.steps;
  o.checkpoint_meta = {{"seed", std::to_string(f.seed)}, {"model", f.model}};
  return o;
}

}  // namespace

int run_ps_rank(const Job& job, PsFlags f) {
  const bool dedicated = f.placement == "dedicated";
  const int world = ps_world(f);
  if (job.size != world)
    throw Error(Errc::kInvalidArgument,
                "braid ps: " + std::to_string(f.workers) + " workers and " +
                    std::to_string(f.servers) + " servers (" + f.placement + ")" +
                    (f.spare_servers > 0 ? " and " + std::to_string(f.spare_servers) + " spares" : "") +
                    " need " + std::to_string(world) + " ranks, the job has " +
                    std::to_string(job.size));
  const bool is_worker = job.rank < f.workers;
  const int spare = dedicated && job.rank >= f.workers + f.servers ? job.rank - f.workers - f.servers : -1;
  const int server = dedicated ? (is_worker || spare >= 0 ? -1 : job.rank - f.workers)
                               : (job.rank < f.servers ? job.rank : -1);
  if (job.rank == 0 && dedicated && f.replicas >= 2) {
    const std::string option = launch::launcher_recovery_option();
    if (!option.empty())
      BRAID_LOG(kWarn, "braid ps: --replicas " << f.replicas << " lets a server die, but this "
                       "launcher ends the whole job when any rank dies; start it with "
                           << option << " to train on through a server's death");
  }
  apply_threads(f, world, job.rank == 0);
  apply_model_defaults(f);
  TrainSetup setup = build_setup(f, job.rank == 0);
  ps::Layout layout(f.servers);
  std::vector<std::vector<float>> init;
  ps::ModelKeys sparse(*setup.model, setup.model->parameters());
  sparse.add_keys(layout, init);
  // --resume: every rank finds the same step directory (nothing writes
  // one before every worker has pulled, i.e. before all of them read it).
  int64_t start = 0;
  std::string resume_dir;
  if (!f.resume.empty()) {
    const ps::ResumePoint rp = ps::find_resume_point(f.resume);
    Checkpoint meta;
    meta.meta = rp.meta;
    start = resume_step(meta, f.seed, rp.step_dir);
    BRAID_CHECK_ARG(start < setup.steps, "braid ps: the checkpoint in " + rp.step_dir +
                                             " is at step " + std::to_string(start) +
                                             ", --steps " + std::to_string(setup.steps) +
                                             " leaves nothing to train");
    resume_dir = rp.step_dir;
  }
  if (spare >= 0)
    return run_ps_spare(job, f, spare, [&](int id, const std::vector<int>& shards) {
      ps::ServerOptions o = server_options(f, setup, id);
      o.secret = job.secret;
      o.join = shards;
      o.save_dir.clear();  // a joiner's shards are saved by their home servers
      return std::make_unique<ps::Server>(
          layout, o, job.store, init,
          [&](ps::KeyId k, int64_t row, float* out) { sparse.init_row(k, row, out); });
    });
  std::unique_ptr<ServerFaults> faults;
  std::unique_ptr<ps::Server> srv;
  if (server >= 0) {
    faults = std::make_unique<ServerFaults>(job, f, server);
    ps::ServerOptions o = server_options(f, setup, server);
    o.secret = job.secret;
    o.resume_from = resume_dir;
    srv = std::make_unique<ps::Server>(
        layout, o, job.store, init,
        [&](ps::KeyId k, int64_t row, float* out) { sparse.init_row(k, row, out); });
  }
  int rc = 0;
  try {
    if (is_worker) rc = run_ps_worker(job, f, job.rank, setup, layout, sparse, start);
  } catch (const std::exception& e) {
    launch::post_failure(*job.store, job.rank, e.what());
    throw;
  }
  // A server lives until every worker has said goodbye; the job's
  // supervisor or launcher ends it sooner when a rank fails (other than a
  // server that marked its death survivable, ps_faults.h). A launcher that
  // lets ranks die (mpirun --enable-recovery) does not: then a worker's
  // posted failure ends it, or the server finding a worker lost (one that
  // died without a goodbye or an error: ps/server/server_lost.cc), which it posts
  // for the other ranks.
  while (srv) {
    try {
      srv->wait_finished(std::chrono::seconds(1));
      break;
    } catch (const Error& e) {
      if (e.code() != Errc::kTimeout) {
        launch::post_failure(*job.store, job.rank, e.what());
        throw;
      }
      if (auto why = launch::posted_failure(*job.store)) {
        // Its waiting workers learn why, not only that it stops.
        srv->fail("a worker failed (" + *why + ")");
        throw Error(Errc::kPeerDied, "parameter server " + std::to_string(server) +
                                         " stops: a worker failed (" + *why + ")");
      }
    }
  }
  return rc;
}

}  // namespace braid::tool
