// What a `braid train` run shows and writes as it goes: rank 0's progress
// and throughput, the JSON log (step records, per-rank splits, the done
// record's common fields), when a checkpoint is due, and the resumption
// after `braid run --max-restarts` restarted the job.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/kernels.h"
#include "braid/trainer.h"
#include "train_setup.h"

namespace braid::tool {

// 12.3k, 1.25M — for progress lines.
inline std::string human(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

inline std::string eta_str(double s) {
  char b[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%.0fs", s);
  return b;
}

// Rank 0's view of a run: a progress bar on a terminal, plain lines
// otherwise (every `log_every` steps), and the throughput over the steps
// after the first `warm` (over all of them when the run is shorter).
class StepReporter {
 public:
  // `show`: this process prints (rank 0, not --quiet). Starts the clock.
  StepReporter(const TrainFlags& f, int64_t first, int64_t steps, int64_t warm, bool show)
      : first_(first),
        steps_(steps),
        warm_(warm),
        units_per_step_(f.batch * (f.model == "gpt" ? f.context : 1)),
        unit_(f.model == "gpt" ? "tokens/s" : "samples/s"),
        show_(show && !f.quiet),
        tty_(show_ && ::isatty(STDERR_FILENO)),
        log_every_(f.log_every > 0 ? f.log_every : std::max<int64_t>(1, steps / 20)),
        t0_(now_s()),
        t_warm_(t0_),
        warm_step_(first) {}

  const char* unit() const { return unit_; }
  // True for the steps the throughput counts.
  bool measured(int64_t s) const { return s + 1 - first_ > warm_; }

  // After step `s` (0-based). Throws when the loss is no longer finite.
  // `comm_frac` ≥ 0 adds "comm N%" to the bar.
  void after_step(int64_t s, const nn::StepStats& st, double comm_frac = -1) {
    if (!std::isfinite(st.loss))
      throw Error(Errc::kInvalidArgument, "loss became " + std::to_string(st.loss) +
                                              " at step " + std::to_string(st.step) +
                                              " (lower --lr?)");
    const double now = now_s();
    if (s + 1 - first_ == warm_) {
      t_warm_ = now;
      warm_step_ = s + 1;
    }
    if (!show_) return;
    const int64_t done = s + 1 - first_;
    const double rate = double(done) * double(units_per_step_) / (now - t0_);
    const double eta = double(steps_ - s - 1) * (now - t0_) / double(done);
    if (tty_) {
      int width = 24, fill = int(double(s + 1) / double(steps_) * width);
      std::string bar(size_t(fill), '=');
      if (fill < width) bar += '>' + std::string(size_t(width - fill - 1), ' ');
      char comm[32] = "";
      if (comm_frac >= 0) std::snprintf(comm, sizeof comm, " | comm %.0f%%", 100.0 * comm_frac);
      std::fprintf(stderr, "\r  step %lld/%lld [%s] loss %.4f | %s %s%s | ETA %s   ",
                   (long long)(s + 1), (long long)steps_, bar.c_str(), st.loss,
                   human(rate).c_str(), unit_, comm, eta_str(eta).c_str());
      std::fflush(stderr);
    } else if ((s + 1) % log_every_ == 0 || s + 1 == steps_) {
      std::printf("step %lld/%lld loss %.4f lr %.4g %s %s eta %s\n", (long long)(s + 1),
                  (long long)steps_, st.loss, st.lr, human(rate).c_str(), unit_,
                  eta_str(eta).c_str());
      std::fflush(stdout);
    }
  }

  // Ends the bar; returns units per second. Call once, after the last step.
  double finish() {
    t_end_ = now_s();
    if (tty_) std::fprintf(stderr, "\n");
    int64_t measured = steps_ - warm_step_;
    double secs = t_end_ - t_warm_;
    if (measured <= 0) {  // no step after the warm-up: use them all
      measured = steps_ - first_;
      secs = t_end_ - t0_;
    }
    return secs > 0 ? double(measured * units_per_step_) / secs : 0;
  }
  double seconds() const { return t_end_ - t0_; }  // after finish()

 private:
  int64_t first_, steps_, warm_, units_per_step_;
  const char* unit_;
  bool show_, tty_;
  int64_t log_every_;
  double t0_, t_warm_, t_end_ = 0;
  int64_t warm_step_;
};

// The --json-log stream of the logging rank: open when `logger` and the
// flag is set, else closed (writes are skipped by checking is_open()).
// After a restart (resume_after_restart) the log goes on: the records of
// the runs before stay, a {"event": "restart"} record says where this run
// starts, and the steps it repeats are logged again.
inline std::ofstream open_json_log(const TrainFlags& f, bool logger) {
  std::ofstream log;
  if (!logger || f.json_log.empty()) return log;
  log.open(f.json_log, f.restart > 0 ? std::ios::app : std::ios::trunc);
  if (!log) throw Error(Errc::kIo, "cannot open --json-log " + f.json_log);
  if (f.restart > 0)
    log << nlohmann::json{{"event", "restart"},
                          {"restart", f.restart},
                          {"resume_from", f.resume.empty() ? nlohmann::json(nullptr)
                                                           : nlohmann::json(f.resume)}}
               .dump()
        << '\n';
  return log;
}

// Under `braid run --max-restarts` (BRAID_RESTART_COUNT above 0), as
// torchrun's restarted scripts do: resume from --checkpoint when it holds
// one (checkpoints are written whole, then renamed into place, so it is the
// newest complete one), else from --resume, else from the start; and
// append to --json-log. Says which on `speaker`.
inline void resume_after_restart(TrainFlags& f, bool speaker) {
  f.restart = env_int("BRAID_RESTART_COUNT", 0);
  if (f.restart <= 0) return;
  if (!f.checkpoint.empty() && ::access(f.checkpoint.c_str(), R_OK) == 0) f.resume = f.checkpoint;
  if (speaker)
    std::fprintf(stderr, "braid train: restart %lld: %s\n", (long long)f.restart,
                 f.resume.empty() ? "no checkpoint written yet, training from the start"
                                  : ("resuming from " + f.resume).c_str());
}

// The fields every step record carries; `--dp` adds the ranks' time split.
// Under loss scaling (--precision fp16) also the scale and whether the
// step was skipped.
inline nlohmann::json step_record(const nn::StepStats& st) {
  nlohmann::json j = {{"step", st.step}, {"loss", st.loss}, {"lr", st.lr}, {"grad_norm", st.grad_norm}};
  if (st.loss_scale > 0) {
    j["loss_scale"] = st.loss_scale;
    j["skipped"] = st.skipped;
  }
  return j;
}

// One --json-log line: the step record plus, for each of `fields`, an
// array of that field of every rank in `ranks` (the ranks' time split).
template <class Rank>
void log_step_per_rank(std::ofstream& log, const nn::StepStats& st, const std::vector<Rank>& ranks,
                       std::initializer_list<std::pair<const char*, double Rank::*>> fields,
                       const nlohmann::json& moe = nullptr) {
  nlohmann::json rec = step_record(st);
  if (!moe.is_null()) rec["moe"] = moe;  // train_moe.h's record
  for (const auto& [name, field] : fields) {
    nlohmann::json column = nlohmann::json::array();
    for (const Rank& r : ranks) column.push_back(r.*field);
    rec[name] = std::move(column);
  }
  log << rec.dump() << std::endl;  // whole records survive a rank killed mid-run
}

// Whether --checkpoint-every asks for a checkpoint after step s (0-based).
inline bool checkpoint_due(const TrainFlags& f, int64_t s) {
  return !f.checkpoint.empty() && f.checkpoint_every > 0 && (s + 1) % f.checkpoint_every == 0;
}

// The fields every done record carries; the caller adds the rest.
inline nlohmann::json done_record(const TrainFlags& f, int64_t steps, double final_loss,
                                  double seconds, double throughput) {
  nlohmann::json d{{"event", "done"},        {"model", f.model},
                   {"steps", steps},         {"final_loss", final_loss},
                   {"train_seconds", seconds}, {"threads", f.threads},
                   {"blas_core", blas_core()},
                   {"blas_threading", blas_threading_name(blas_info().threading)}};
  d[f.model == "gpt" ? "tokens_per_s" : "samples_per_s"] = throughput;
  return d;
}

}  // namespace braid::tool
