// braid train gpt|mlp --auto [--world N] — the layout from the planner.
//
// For the world it is given (the launcher's job size; started plainly,
// --world or one rank per usable core), `braid plan`'s search
// (braid/plan_search.h) on the this-machine cluster picks dp, tp, pp,
// micro-batches, the schedule, sequence parallelism and the ZeRO stage for
// the flags' model and global batch (of the layouts predicted within 2% of
// the fastest, the one that shards least, then splits the batch least).
// It prints the choice, its
// predicted step and why, then runs it as `braid train` with those flags
// would (train_mp.cc). The search is limited to what `braid
// train` runs: no recomputation beyond the flags' own --recompute (every
// block or none), ZeRO 2 and 3 only without tp or pp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/plan_cluster.h"
#include "braid/plan_model.h"
#include "braid/plan_search.h"
#include "subcommands.h"
#include "train_setup.h"

namespace braid::tool {

bool auto_requested(int argc, char** argv) { return has_any_flag(argc, argv, {"--auto"}); }

int train_auto_main(int argc, char** argv) {
  // The flags as `braid train` reads them (its defaults included); the
  // command-specific ones pass through to the run.
  CLI::App app{"braid train --auto", "braid train"};
  TrainFlags f;
  add_train_options(app, f, true);
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const char* fixed : {"--dp", "--tp", "--pp", "--micro-batches", "--schedule",
                            "--virtual-stages", "--sequence-parallel", "--zero"})
    if (has_any_flag(argc, argv, {fixed}))
      throw Error(Errc::kInvalidArgument, std::string("--auto chooses ") + fixed +
                                              " itself; give --auto or the layout, not both");
  if (f.model != "gpt" && f.model != "mlp")
    throw Error(Errc::kInvalidArgument,
                "--auto plans gpt and mlp, not '" + f.model + "' (braid train gpt --auto)");
  apply_model_defaults(f);
  const CLI::Option* world_opt = app.get_option("--world");
  const int job = job_world_from_env();
  int world = job > 1 ? job : usable_cores();
  if (world_opt->count() > 0) {
    const std::string v = world_opt->as<std::string>();
    int n = 0;
    try {
      size_t end = 0;
      n = std::stoi(v, &end);
      if (end != v.size()) n = 0;
    } catch (const std::exception&) {
    }
    if (n < 1)
      throw Error(Errc::kInvalidArgument,
                  "--world must be a whole number of at least 1, not '" + v + "'");
    if (job > 1 && n != job)
      throw Error(Errc::kInvalidArgument, "--world " + v + " but the launcher started " +
                                              std::to_string(job) + " ranks");
    world = n;
  }
  const std::string& model = f.model;
  const int64_t batch = f.batch;
  plan::ModelDesc desc;
  if (model == "gpt") {
    const nn::GptConfig c = gpt_config(f);
    plan::GptShape g;
    g.layers = c.layers;
    g.hidden = c.dim;
    g.heads = c.heads;
    g.seq = c.context;
    g.vocab = c.vocab;
    desc = plan::describe_gpt(g);
  } else {
    desc = plan::describe_mlp({784, 512, 512, 10});
  }
  const plan::Cluster cluster = plan::cluster_preset("this-machine");
  plan::SearchSpec spec;
  spec.devices = world;
  spec.batch = batch;
  spec.recompute = f.recompute ? plan::Recompute::kFull : plan::Recompute::kNone;
  plan::SearchResult found = plan::search(desc, cluster, spec);
  // braid train runs ZeRO 2 and 3 only without tp and pp.
  std::vector<plan::Estimate> runnable;
  for (const plan::Estimate& e : found.fits)
    if (e.layout.zero <= 1 || (e.layout.tp == 1 && e.layout.pp == 1)) runnable.push_back(e);
  if (runnable.empty())
    throw Error(Errc::kInvalidArgument,
                "--auto: no layout of " + model + " fits " + std::to_string(world) +
                    " ranks of this machine at --batch " + std::to_string(batch) + " (" +
                    std::to_string(found.considered) + " considered, " +
                    std::to_string(found.too_big) + " over memory)");
  // Among the layouts predicted within 2% of the fastest, the one that
  // shards least (pipeline stages, then tp, then the ZeRO stage), then
  // splits the batch least (the fewest micro-batches): a sharding or a
  // split that buys no predicted time only adds communication or
  // per-micro-batch work that the model prices least surely (ZeRO-3's
  // gathers; the weight gradients' thin GEMMs of a small micro-batch,
  // which it prices as square ones of the same FLOPs).
  size_t pick = 0;
  auto simpler = [](const plan::Layout& a, const plan::Layout& b) {
    if (a.pp != b.pp) return a.pp < b.pp;
    if (a.tp != b.tp) return a.tp < b.tp;
    if (a.zero != b.zero) return a.zero < b.zero;
    return a.mbs > b.mbs;
  };
  for (size_t i = 1; i < runnable.size(); ++i)
    if (runnable[i].step_s <= runnable[0].step_s * 1.02 &&
        simpler(runnable[i].layout, runnable[pick].layout))
      pick = i;
  std::swap(runnable[0], runnable[pick]);
  const plan::Estimate& best = runnable.front();
  const plan::Layout& l = best.layout;
  if (job_rank_from_env() == 0) {
    std::printf("braid train --auto: %d ranks, %zu layouts estimated; chose %s (%d micro-batches), "
                "predicted %.3g s a step, %s\n",
                world, found.considered, plan::layout_text(l).c_str(), best.micro_batches,
                best.step_s, plan::dominant_term(best).c_str());
    if (pick != 0)
      std::printf(
          "  why: predicted within 2%% of the fastest, %s (%.3g s), and shards or splits "
          "the batch less\n",
          plan::layout_text(runnable[pick].layout).c_str(), runnable[pick].step_s);
    else if (runnable.size() > 1)
      std::printf("  why: %s\n", plan::why_wins(best, runnable[1]).c_str());
    std::fflush(stdout);
  }
  // Run it: the same flags with the layout spelled out.
  std::vector<std::string> run = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--auto" || a.rfind("--world=", 0) == 0) continue;
    if (a == "--world") {
      ++i;
      continue;
    }
    run.push_back(a);
  }
  for (const std::string& s :
       {std::string("--dp"), std::to_string(l.dp), std::string("--tp"), std::to_string(l.tp),
        std::string("--pp"), std::to_string(l.pp), std::string("--micro-batches"),
        std::to_string(best.micro_batches), std::string("--schedule"), l.schedule,
        std::string("--zero"), std::to_string(l.zero)})
    run.push_back(s);
  if (l.schedule == "interleaved") {
    run.push_back("--virtual-stages");
    run.push_back(std::to_string(l.virtual_stages));
  }
  if (l.sequence_parallel) run.push_back("--sequence-parallel");
  std::vector<char*> cargs;
  for (std::string& s : run) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  return train_mp_main(int(run.size()), cargs.data());
}

}  // namespace braid::tool
