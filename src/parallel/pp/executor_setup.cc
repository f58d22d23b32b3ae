// PipelineExecutor's construction: this rank's chunks of the model, the
// activation slots each chunk needs (the most micro-batches the schedule
// keeps live on it) filled with copies of its modules, and the per-step
// memory accounting. The header says what each constructor checks.
#include <algorithm>

#include "braid/comm.h"
#include "braid/error.h"
#include "parallel/pp/executor_stage.h"

namespace braid::parallel {

namespace {

// This rank's chunks of a whole model, cut at `bounds`.
std::vector<std::vector<nn::Module*>> rank_chunks(nn::Sequential& model,
                                                  const std::vector<size_t>& bounds,
                                                  const Schedule& s, int rank) {
  std::vector<std::vector<nn::Module*>> chunks(size_t(s.chunks));
  for (int c = 0; c < s.chunks && rank < s.ranks; ++c) {
    const size_t v = size_t(s.stage_of(rank, c));
    for (size_t i = bounds[v]; i < bounds[v + 1]; ++i) chunks[size_t(c)].push_back(&model.child(i));
  }
  return chunks;
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::shared_ptr<Communicator> comm, nn::Sequential& model,
                                   ModelFactory copy, std::vector<size_t> bounds,
                                   Schedule schedule, PipelineOptions opts)
    : comm_(std::move(comm)), sched_(std::move(schedule)), opts_(std::move(opts)) {
  const int S = sched_.stages();
  bool ok = int(bounds.size()) == S + 1 && bounds.front() == 0 && bounds.back() == model.size();
  for (size_t i = 1; ok && i < bounds.size(); ++i) ok = bounds[i - 1] < bounds[i];
  std::string got;
  for (size_t b : bounds) got += (got.empty() ? "" : ", ") + std::to_string(b);
  BRAID_CHECK_ARG(ok, "pipeline: stage bounds [" + got + "] do not cut the model's " +
                          std::to_string(model.size()) + " modules into " + std::to_string(S) +
                          " non-empty stages (want " + std::to_string(S + 1) +
                          " increasing bounds from 0 to " + std::to_string(model.size()) + ")");
  // The communicator's size is checked by init; a rank outside the
  // schedule owns no stage here.
  const int rank = comm_ ? comm_->rank() : 0;
  ChunkFactory chunk_copy;
  if (copy)
    chunk_copy = [copy, bounds, rank, size = model.size(), this]() {
      std::shared_ptr<nn::Sequential> m = copy();
      BRAID_CHECK_ARG(m && m->size() == size,
                      "pipeline: a copy of the model has " + std::to_string(m ? m->size() : 0) +
                          " modules, the model " + std::to_string(size));
      ChunkCopy cc{rank_chunks(*m, bounds, sched_, rank), m};
      // Modules of other ranks' stages never run in a copy: free them.
      std::vector<bool> mine(size, false);
      for (int c = 0; c < sched_.chunks && rank < sched_.ranks; ++c) {
        const size_t v = size_t(sched_.stage_of(rank, c));
        std::fill(mine.begin() + ptrdiff_t(bounds[v]), mine.begin() + ptrdiff_t(bounds[v + 1]), true);
      }
      for (size_t i = 0; i < size; ++i)
        if (!mine[i])
          for (nn::Parameter* p : m->child(i).parameters()) {
            p->data.release();
            p->grad.release();
          }
      return cc;
    };
  init(rank_chunks(model, bounds, sched_, rank), chunk_copy);
}

PipelineExecutor::PipelineExecutor(std::shared_ptr<Communicator> comm,
                                   std::vector<std::vector<nn::Module*>> chunks, ChunkFactory copy,
                                   Schedule schedule, PipelineOptions opts)
    : comm_(std::move(comm)), sched_(std::move(schedule)), opts_(std::move(opts)) {
  init(std::move(chunks), copy);
}

void PipelineExecutor::init(std::vector<std::vector<nn::Module*>> chunks,
                            const ChunkFactory& copy) {
  report_ = check_schedule(sched_);  // refuses what the checker rejects
  BRAID_CHECK_ARG(comm_ && comm_->size() == sched_.ranks,
                  "pipeline: schedule '" + sched_.name + "' is for " + std::to_string(sched_.ranks) +
                      " ranks, the communicator has " + std::to_string(comm_ ? comm_->size() : 0));
  BRAID_CHECK_ARG(int(chunks.size()) == sched_.chunks,
                  "pipeline: " + std::to_string(chunks.size()) + " chunks of modules for schedule '" +
                      sched_.name + "' with " + std::to_string(sched_.chunks) + " per rank");
  BRAID_CHECK_ARG(opts_.activation_slots >= 0,
                  "pipeline: activation_slots " + std::to_string(opts_.activation_slots) +
                      " (0: as the schedule needs, or at least 1)");
  rank_ = comm_->rank();
  timings_.assign(sched_.actions[size_t(rank_)].size(), {});
  // Per chunk: where each micro-batch's backward stands in this rank's
  // list, and the most micro-batches live at once (the slots it needs).
  const int C = sched_.chunks, M = sched_.micro_batches;
  std::vector<std::vector<int>> backward_at(size_t(C), std::vector<int>(size_t(M), 0));
  std::vector<int> live(size_t(C), 0), need(size_t(C), 1);
  const auto& list = sched_.actions[size_t(rank_)];
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.kind == ActionKind::kForward) {
      int& n = live[size_t(a.chunk)];
      need[size_t(a.chunk)] = std::max(need[size_t(a.chunk)], ++n);
    } else if (a.kind == ActionKind::kBackward) {
      --live[size_t(a.chunk)];
      backward_at[size_t(a.chunk)][size_t(a.mb)] = int(i);
    }
  }
  int copies = 0;
  for (int& n : need) {
    if (opts_.activation_slots > 0) n = std::min(n, opts_.activation_slots);
    copies = std::max(copies, n - 1);
  }
  BRAID_CHECK_ARG(copies == 0 || copy,
                  "pipeline: schedule '" + sched_.name + "' keeps " + std::to_string(copies + 1) +
                      " micro-batches live on a chunk of rank " + std::to_string(rank_) +
                      ", which needs copies of its modules: give a factory for them, or set "
                      "PipelineOptions::activation_slots to 1 to recompute instead");
  for (int c = 0; c < C; ++c) {
    const int stage = sched_.stage_of(rank_, c);
    auto st = std::make_shared<Stage>(
        c, stage,
        "pipeline stage " + std::to_string(stage) + " (rank " + std::to_string(rank_) +
            ", chunk " + std::to_string(c) + ")",
        backward_at[size_t(c)]);
    BRAID_CHECK_ARG(!chunks[size_t(c)].empty(),
                    "pipeline: stage " + std::to_string(st->stage) + " (rank " +
                        std::to_string(rank_) + ", chunk " + std::to_string(c) + ") has no modules");
    for (auto* m : chunks[size_t(c)]) m->collect_parameters(params_);
    st->slots.add(std::move(chunks[size_t(c)]));
    const auto& at = backward_at[size_t(c)];
    st->last_backward = int(std::max_element(at.begin(), at.end()) - at.begin());
    st->in.resize(size_t(M));
    st->act_out.resize(size_t(M));
    st->grad_in.resize(size_t(M));
    st->grad_out.resize(size_t(M));
    stages_.push_back(st);
  }
  for (int k = 1; k <= copies; ++k) {
    ChunkCopy cc = copy();
    BRAID_CHECK_ARG(int(cc.chunks.size()) == C,
                    "pipeline: a copy has " + std::to_string(cc.chunks.size()) +
                        " chunks of modules, schedule '" + sched_.name + "' " + std::to_string(C));
    for (int c = 0; c < C; ++c) {
      // A chunk that needs fewer slots than another still shares the
      // copy's parameters, so that they are freed.
      if (k < need[size_t(c)])
        stages_[size_t(c)]->slots.add(std::move(cc.chunks[size_t(c)]));
      else
        stages_[size_t(c)]->slots.share(cc.chunks[size_t(c)]);
    }
    copies_.push_back(std::move(cc.owner));
  }
  for (auto& st : stages_)
    for (int k = 0; st->stage > 0 && k < st->slots.size(); ++k)
      st->slots.modules(k).front()->set_input_grad(true);  // its gradient is sent back
}

std::vector<int> PipelineExecutor::slots() const {
  std::vector<int> n;
  for (const auto& st : stages_) n.push_back(st->slots.size());
  return n;
}

void PipelineExecutor::account() {
  int64_t act = 0, held = 0;
  int live = 0;
  for (const auto& st : stages_) {
    act += st->slots.bytes_in_use();
    live += st->slots.in_use();
    for (size_t m = 0; m < st->in.size(); ++m) {
      if (st->stage > 0) held += int64_t(st->in[m].nbytes());
      // An output awaiting its send is a view of its slot (counted there)
      // unless recomputation evicted it from the slot first.
      if (st->act_out[m].owning()) held += int64_t(st->act_out[m].nbytes());
      held += int64_t(st->grad_in[m].nbytes() + st->grad_out[m].nbytes());
    }
  }
  peak_activation_ = std::max(peak_activation_, act);
  peak_held_ = std::max(peak_held_, act + held);
  peak_live_ = std::max(peak_live_, live);
}

}  // namespace braid::parallel
