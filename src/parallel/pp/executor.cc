// PipelineExecutor: runs this rank's list of a checked schedule on its
// chunks of the model. The header says what a step does and costs.
//
// Buffers per chunk and micro-batch live only while the schedule needs
// them: the stage input from its receive (or a view of the caller's batch
// on stage 0) until the backward, the incoming gradient from its receive
// (or the loss) until the backward, the outgoing gradient until its send.
// So the executor's memory follows the schedule's live activations
// (check_schedule's peak_live), not M. The modules' own activations live
// in the chunk's slots (activation_slots.h).
//
// A stage's output is sent straight from the slot that computed it
// (act_out[mb] is a view of the last module's output, or of whatever
// tensor that module returned: its input, an earlier module's output, all
// of which the slot keeps until mb's backward). Nothing rewrites it before
// the send completes: the slot's modules run again only for a later
// forward in that slot or for mb's backward. mb's backward comes after
// the action that receives mb's gradient, which comes after the action
// that sends mb's activation (the stage after needs it to make that
// gradient; check_schedule proves the order), and communicate() returns
// only when all its transfers have completed. A later forward takes the
// slot only once mb's backward has freed it, or by evicting mb under
// recomputation — and that may come before the send (two forwards in one
// block), so eviction first copies an unsent output out of the slot.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "braid/comm.h"
#include "braid/error.h"
#include "parallel/pp/executor_stage.h"

namespace braid::parallel {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Shape messages (learn_shapes) use tags above every transfer_tag.
constexpr uint32_t kShapeTag = 1u << 30;  // braid tags stop at 2^31 − 1
constexpr int kMaxDims = 8;

// Rows [mb·rows, (mb+1)·rows) of t along dim 0, as a view.
Tensor rows_of(const Tensor& t, int mb, int64_t rows) {
  Shape s = t.shape();
  const int64_t per_row = t.numel() / s[0];
  s[0] = rows;
  auto* base = static_cast<char*>(const_cast<void*>(t.raw()));
  return Tensor::view(base + size_t(mb) * size_t(rows * per_row) * dtype_size(t.dtype()), s,
                      t.dtype());
}

void keep_copy(Tensor& dst, const Tensor& src) {
  dst.resize(src.shape(), src.dtype());
  dst.copy_from(src);
}

}  // namespace

void PipelineExecutor::learn_shapes(const Shape& mb_shape, DType mb_dtype) {
  // Stage by stage, in order: each runs its modules once on zeros to learn
  // its output shape and tells the next stage's rank.
  for (int s = 0; s < sched_.stages(); ++s) {
    if (sched_.rank_of(s) != rank_) continue;
    Stage& st = *stages_[size_t(sched_.chunk_of(s))];
    if (s > 0) {
      int64_t hdr[kMaxDims + 1];
      comm_->recv(hdr, kMaxDims + 1, DType::kI64, sched_.rank_of(s - 1), kShapeTag | uint32_t(s));
      st.in_shape.assign(hdr + 1, hdr + 1 + hdr[0]);
      st.in_dtype = DType::kF32;
    } else {
      st.in_shape = mb_shape;
      st.in_dtype = mb_dtype;
    }
    Tensor x(st.in_shape, st.in_dtype);
    nn::Context ctx;
    ctx.training = false;
    const Tensor* y = &x;
    for (auto* m : st.slots.modules(0)) y = &m->forward(*y, ctx);
    st.out_shape = y->shape();
    if (s + 1 == sched_.stages()) continue;
    BRAID_CHECK_ARG(y->dtype() == DType::kF32 && y->ndim() <= kMaxDims,
                    "pipeline: stage " + std::to_string(s) + " outputs " + dtype_name(y->dtype()) +
                        " " + shape_str(y->shape()) + "; stages pass f32 of at most " +
                        std::to_string(kMaxDims) + " dimensions");
    int64_t hdr[kMaxDims + 1] = {y->ndim()};
    for (int d = 0; d < y->ndim(); ++d) hdr[d + 1] = y->dim(d);
    comm_->send(hdr, kMaxDims + 1, DType::kI64, sched_.rank_of(s + 1), kShapeTag | uint32_t(s + 1));
  }
}

void PipelineExecutor::forward(int mb, int chunk, bool for_backward) {
  Stage& st = *stages_[size_t(chunk)];
  nn::Context ctx;
  ctx.seed = ps_->seed;
  ctx.step = ps_->step;
  ctx.sample_offset = ps_->first_row + mb * mb_rows_;
  ctx.loss_scale = ps_->scale;
  if (st.stage == 0) st.in[size_t(mb)] = rows_of(*input_, mb, mb_rows_);
  // The slot's modules keep pointers to their inputs until mb's backward:
  // st.in[mb] and their own outputs, all of which stay put until then.
  int evicted = -1;
  const int slot = st.slots.take(mb, &evicted);
  if (evicted >= 0 && !st.act_out[size_t(evicted)].owning() &&
      !st.act_out[size_t(evicted)].empty())
    st.act_out[size_t(evicted)] = Tensor(st.act_out[size_t(evicted)]);  // a deep copy
  const Tensor* y = &st.in[size_t(mb)];
  int64_t bytes = 0;
  for (auto* m : st.slots.modules(slot)) {
    y = &m->forward(*y, ctx);
    bytes += int64_t(y->nbytes());
  }
  st.slots.set_bytes(slot, bytes);
  if (for_backward) return;
  if (st.stage + 1 < sched_.stages()) {
    st.act_out[size_t(mb)] =
        Tensor::view(const_cast<void*>(y->raw()), y->shape(), y->dtype());
    return;
  }
  const Tensor target = rows_of(*target_, mb, mb_rows_);
  sums_[0] += ps_->loss->forward(*y, target);
  sums_[1] += double(target.numel());
  sums_[2] += double(ps_->loss->correct());
  keep_copy(st.grad_in[size_t(mb)], ps_->loss->backward(ps_->scale));
}

void PipelineExecutor::backward(int mb, int chunk) {
  Stage& st = *stages_[size_t(chunk)];
  if (st.slots.find(mb) < 0) {  // its activations were given up (recomputation)
    forward(mb, chunk, true);
    ++recomputed_;
  }
  const auto& modules = st.slots.modules(st.slots.find(mb));
  nn::Context ctx;
  ctx.seed = ps_->seed;
  ctx.step = ps_->step;
  ctx.sample_offset = ps_->first_row + mb * mb_rows_;
  ctx.loss_scale = ps_->scale;
  if (ps_->grad_ready && mb == st.last_backward)
    ctx.grad_ready = [&](nn::Parameter& p) { ps_->grad_ready(st.slots.model_parameter(p)); };
  const Tensor* dy = &st.grad_in[size_t(mb)];
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) dy = &(*it)->backward(*dy, ctx);
  if (st.stage > 0) keep_copy(st.grad_out[size_t(mb)], *dy);
  st.slots.free(mb);
  st.in[size_t(mb)].release();
  st.grad_in[size_t(mb)].release();
}

void PipelineExecutor::communicate(const Action& a) {
  std::vector<Work> works;
  std::vector<Tensor*> sent;
  for (const Transfer& t : a.transfers) {
    const bool act = t.what == Payload::kActivation;
    const uint32_t tag = transfer_tag(sched_, t);
    if (t.send) {
      Stage& st = *stages_[size_t(sched_.chunk_of(t.stage))];
      Tensor& buf = (act ? st.act_out : st.grad_out)[size_t(t.mb)];
      works.push_back(comm_->send_async(buf.raw(), size_t(buf.numel()), DType::kF32, t.peer, tag));
      sent.push_back(&buf);
    } else {
      Stage& st = *stages_[size_t(sched_.chunk_of(act ? t.stage + 1 : t.stage - 1))];
      Tensor& buf = (act ? st.in : st.grad_in)[size_t(t.mb)];
      buf = Tensor(act ? st.in_shape : st.out_shape);
      works.push_back(comm_->recv_async(buf.raw(), size_t(buf.numel()), DType::kF32, t.peer, tag));
    }
  }
  // Every transfer ends (or fails) before its buffer may go.
  std::exception_ptr first;
  for (Work& w : works) {
    try {
      w.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  // Empty, not release(): a view (an output sent from its slot) would
  // survive release() and look unsent.
  for (Tensor* b : sent) *b = Tensor();
}

void PipelineExecutor::run(const Tensor& input, const Tensor& target, const PipelineStep& ps,
                           double sums[3]) {
  BRAID_CHECK_ARG(ps.loss != nullptr, "pipeline: a step without a loss");
  const int M = sched_.micro_batches;
  const int last = sched_.rank_of(sched_.stages() - 1);
  // The micro-batch shape and dtype, from the rank that has the input.
  int64_t hdr[kMaxDims + 2] = {0};
  if (rank_ == 0) {
    BRAID_CHECK_ARG(input.ndim() >= 1 && input.ndim() <= kMaxDims && input.dim(0) % M == 0 &&
                        input.dim(0) > 0,
                    "pipeline: input " + shape_str(input.shape()) + " does not split into " +
                        std::to_string(M) + " micro-batches along dim 0");
    hdr[0] = input.ndim();
    hdr[1] = int64_t(input.dtype());
    for (int d = 0; d < input.ndim(); ++d) hdr[d + 2] = d == 0 ? input.dim(0) / M : input.dim(d);
  }
  comm_->broadcast(hdr, kMaxDims + 2, DType::kI64, 0);
  const Shape mb_shape(hdr + 2, hdr + 2 + hdr[0]);
  mb_rows_ = mb_shape[0];
  // Every rank compares the same broadcast values, so all of them learn
  // the shapes together or none does.
  if (mb_shape != mb_shape_ || DType(hdr[1]) != mb_dtype_) {
    learn_shapes(mb_shape, DType(hdr[1]));
    mb_shape_ = mb_shape;
    mb_dtype_ = DType(hdr[1]);
  }
  if (rank_ == last) {
    BRAID_CHECK_ARG(target.dtype() == DType::kI32 && target.ndim() >= 1 &&
                        target.dim(0) == mb_rows_ * M,
                    "pipeline: target " + shape_str(target.shape()) + " " +
                        dtype_name(target.dtype()) + " is not i32 with " +
                        std::to_string(mb_rows_ * M) + " rows (the input's)");
  }
  ps_ = &ps;
  input_ = &input;
  target_ = &target;
  sums_[0] = sums_[1] = sums_[2] = 0;
  if (ps.round == 0) {
    recomputed_ = 0;
    peak_held_ = peak_activation_ = 0;
    peak_live_ = 0;
    step_span_ = {0, 0};
    step_comm_s_ = 0;
  }
  for (auto& st : stages_) st->slots.clear();
  const auto& list = sched_.actions[size_t(rank_)];
  timings_.assign(list.size(), {});
  // The list ends with the schedule's reduce-gradients and optimizer-step
  // actions (lower_schedule puts them last): those are the step loop's.
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    if (a.kind == ActionKind::kReduceGrads || a.kind == ActionKind::kStep) break;
    timings_[i].start = now_s();
    switch (a.kind) {
      case ActionKind::kForward: forward(a.mb, a.chunk, false); break;
      case ActionKind::kBackward: backward(a.mb, a.chunk); break;
      case ActionKind::kComm: communicate(a); break;
      default: break;
    }
    timings_[i].end = now_s();
    if (a.kind == ActionKind::kComm) step_comm_s_ += timings_[i].end - timings_[i].start;
    // 0 marks a step not begun: the monotonic clock reads 0 only at boot.
    if (step_span_.start == 0) step_span_.start = timings_[i].start;
    step_span_.end = timings_[i].end;
    account();
    if (opts_.after_action) opts_.after_action(int(i));
  }
  ps_ = nullptr;
  for (int k = 0; k < 3; ++k) sums[k] += sums_[k];
}

std::pair<double, double> pipeline_bubble(const std::vector<ActionTiming>& spans,
                                          const std::vector<double>& comm_s) {
  BRAID_CHECK_ARG(!spans.empty() && spans.size() == comm_s.size(),
                  "pipeline_bubble: " + std::to_string(spans.size()) + " spans and " +
                      std::to_string(comm_s.size()) + " communication times");
  double first = spans[0].start, last = spans[0].end;
  for (const ActionTiming& t : spans) {
    first = std::min(first, t.start);
    last = std::max(last, t.end);
  }
  const double span = last - first;
  if (spans.size() == 1) return {0.0, span};
  double idle = 0;
  for (size_t r = 0; r < spans.size(); ++r)
    idle += comm_s[r] + (span - (spans[r].end - spans[r].start));
  return {idle, double(spans.size()) * span};
}

ActionTiming& PipelineExecutor::loop_timing(ActionKind kind) {
  const auto& list = sched_.actions[size_t(rank_)];
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == kind) return timings_[i];
  throw Error(Errc::kInvalidArgument, "pipeline: rank " + std::to_string(rank_) +
                                          "'s list has no " + (kind == ActionKind::kStep
                                              ? "optimizer step" : "reduce-gradients action"));
}

}  // namespace braid::parallel
