// MoeLayer: route, plan the shadows, dispatch to the experts' ranks, run
// the local experts and the shadows, send the outputs home and combine;
// backward the same way in reverse (moe.h has the rules and the
// exchange's order, moe_shadow.h the shadows).
#include <algorithm>
#include <cstring>

#include "braid/env.h"
#include "braid/error.h"
#include "braid/moe.h"
#include "braid/moe_counters.h"
#include "braid/moe_shadow.h"

namespace braid::nn {

namespace {
int ep_size(const std::shared_ptr<ExpertExchange>& ex) { return ex ? ex->size() : 1; }
int ep_rank(const std::shared_ptr<ExpertExchange>& ex) { return ex ? ex->rank() : 0; }
const MoeConfig& checked(const MoeConfig& c, int ep) {
  check_moe(c, ep);
  return c;
}
// f(token, choice index t·k + j, slot) for every kept choice, in token order.
template <class F>
void for_kept(const Routing& r, int64_t k, F&& f) {
  for (int64_t t = 0; t < r.tokens; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t c = size_t(t * k + j);
      if (r.slot[c] >= 0) f(t, c, r.slot[c]);
    }
}
}  // namespace

MoeLayer::MoeLayer(std::string name, int64_t dim, int64_t hidden, const MoeConfig& c,
                   std::shared_ptr<ExpertExchange> exchange)
    : Module(name),
      c_(checked(c, ep_size(exchange))),
      dim_(dim),
      ex_(std::move(exchange)),
      ep_(ep_size(ex_)),
      ep_rank_(ep_rank(ex_)),
      router_(name + ".gate", dim, c),
      experts_(name + ".experts", dim, hidden, ep_rank_ * (c.experts / ep_), c.experts / ep_) {}

bool MoeLayer::is_expert_param(const std::string& name) {
  return name.find(".experts.") != std::string::npos;
}

void MoeLayer::exchange(const float* send, const std::vector<size_t>& send_counts, float* recv,
                        const std::vector<size_t>& recv_counts) {
  const double t0 = now_s();
  ex_->rows(send, send_counts, recv, recv_counts);
  moe_count_exchange(now_s() - t0);
}

void MoeLayer::plan(const Routing& r) {
  const int64_t C = dim_, E = c_.experts, El = E / ep_, first = ep_rank_ * El;
  all_counts_.assign(size_t(ep_ * E), 0);
  if (ep_ > 1) {
    std::vector<int64_t> mine(size_t(ep_ * E));
    for (int d = 0; d < ep_; ++d)
      std::copy(r.per_expert.begin(), r.per_expert.end(), mine.begin() + d * E);
    const double t0 = now_s();
    ex_->counts(mine.data(), all_counts_.data(), size_t(E));
    moe_count_exchange(now_s() - t0);
  } else {
    all_counts_ = r.per_expert;
  }
  shadowed_.assign(size_t(E), 0);
  if (ep_ > 1 && c_.shadow_rows > 0)
    shadowed_ = plan_shadows(all_counts_, ep_, E, c_.shadow_rows).shadowed;
  const auto held = [&](int64_t e) { return e / El == ep_rank_; };
  shadow_of_.clear();
  lent_ = 0;
  for (int64_t e = 0; e < E; ++e)
    if (shadowed_[size_t(e)]) {
      if (held(e))
        ++lent_;
      else
        shadow_of_.push_back(e);
    }
  // Dispatch order: the exchanged experts' slot ranges in expert order,
  // then the shadows' (each expert's slots are one range).
  std::vector<int64_t> slot_at(size_t(E), 0), row_at(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e)
    slot_at[size_t(e)] = slot_at[size_t(e - 1)] + r.per_expert[size_t(e - 1)];
  int64_t at = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t e = 0; e < E; ++e)
      if ((shadowed_[size_t(e)] && !held(e)) == (pass == 1)) {
        row_at[size_t(e)] = at;
        at += r.per_expert[size_t(e)];
      }
    if (pass == 0) exchanged_ = at;
  }
  row_.assign(r.slot.size(), -1);
  for (size_t c = 0; c < r.slot.size(); ++c)
    if (r.slot[c] >= 0) {
      const int64_t e = r.expert[c];
      row_[c] = row_at[size_t(e)] + r.slot[c] - slot_at[size_t(e)];
    }
  send_counts_.assign(size_t(ep_), 0);
  for (int64_t e = 0; e < E; ++e)
    if (!shadowed_[size_t(e)] || held(e))
      send_counts_[size_t(e / El)] += size_t(r.per_expert[size_t(e)] * C);
  // counts_in[s · El + i]: rows from rank s for local expert i (none from
  // other ranks for a lent one).
  std::vector<int64_t> counts_in(size_t(ep_ * El));
  for (int s = 0; s < ep_; ++s)
    for (int64_t i = 0; i < El; ++i)
      counts_in[size_t(s * El + i)] = shadowed_[size_t(first + i)] && s != ep_rank_
                                          ? 0
                                          : all_counts_[size_t(s * E + first + i)];
  recv_counts_.assign(size_t(ep_), 0);
  local_rows_.assign(size_t(El), 0);
  int64_t m = 0;
  for (int s = 0; s < ep_; ++s)
    for (int64_t i = 0; i < El; ++i) {
      const int64_t c = counts_in[size_t(s * El + i)];
      recv_counts_[size_t(s)] += size_t(c * C);
      local_rows_[size_t(i)] += c;
      m += c;
    }
  for (int64_t e : shadow_of_) local_rows_.push_back(r.per_expert[size_t(e)]);
  // Expert-major order of the received rows: expert i's rows from rank 0,
  // then rank 1, … (each source's rows are expert-major already).
  recv_order_.assign(size_t(m), 0);
  std::vector<int64_t> src_at(size_t(ep_ * El));  // first received row of (s, i)
  at = 0;
  for (int s = 0; s < ep_; ++s)
    for (int64_t i = 0; i < El; ++i) {
      src_at[size_t(s * El + i)] = at;
      at += counts_in[size_t(s * El + i)];
    }
  int64_t q = 0;
  for (int64_t i = 0; i < El; ++i)
    for (int s = 0; s < ep_; ++s)
      for (int64_t c = 0; c < counts_in[size_t(s * El + i)]; ++c)
        recv_order_[size_t(q++)] = src_at[size_t(s * El + i)] + c;
}

void MoeLayer::fetch_shadows() {
  const int64_t P = experts_.packed_size(), El = c_.experts / ep_;
  float* in = experts_.shadow_weights(int64_t(shadow_of_.size()));
  if (std::find(shadowed_.begin(), shadowed_.end(), char(1)) == shadowed_.end()) return;
  // Every other rank gets the lent experts' weights; from rank s come its
  // lent experts', ascending, which is shadow_of_'s order.
  std::vector<size_t> sc(size_t(ep_), 0), rc(size_t(ep_), 0);
  lend_.resize({std::max<int64_t>(1, lent_ * (ep_ - 1)), P}, DType::kF32);
  float* o = lend_.f32();
  for (int d = 0; d < ep_; ++d) {
    if (d == ep_rank_) continue;
    for (int64_t i = 0; i < El; ++i)
      if (shadowed_[size_t(ep_rank_ * El + i)]) {
        experts_.pack_weights(i, o);
        o += P;
        sc[size_t(d)] += size_t(P);
      }
  }
  for (int64_t e : shadow_of_) rc[size_t(e / El)] += size_t(P);
  exchange(lend_.f32(), sc, in, rc);
}

void MoeLayer::return_shadow_grads() {
  if (std::find(shadowed_.begin(), shadowed_.end(), char(1)) == shadowed_.end()) return;
  const int64_t P = experts_.packed_size(), El = c_.experts / ep_;
  std::vector<size_t> sc(size_t(ep_), 0), rc(size_t(ep_), 0);
  for (int64_t e : shadow_of_) sc[size_t(e / El)] += size_t(P);
  for (int s = 0; s < ep_; ++s)
    if (s != ep_rank_) rc[size_t(s)] = size_t(lent_ * P);
  lend_.resize({std::max<int64_t>(1, lent_ * (ep_ - 1)), P}, DType::kF32);
  exchange(shadow_of_.empty() ? nullptr : experts_.shadow_grads().f32(), sc, lend_.f32(), rc);
  // Each lent expert's copies' gradients, in rank order, onto its own.
  const float* g = lend_.f32();
  for (int s = 0; s < ep_; ++s) {
    if (s == ep_rank_) continue;
    for (int64_t i = 0; i < El; ++i)
      if (shadowed_[size_t(ep_rank_ * El + i)]) {
        experts_.add_packed_grad(i, g);
        g += P;
      }
  }
}

void MoeLayer::to_experts(const Tensor& rows, Tensor& by_source, Tensor& expert_major) {
  const int64_t C = dim_, m = int64_t(recv_order_.size()), tail = rows.dim(0) - exchanged_;
  const Tensor* in = &rows;
  if (ep_ > 1) {
    by_source.resize({m, C}, DType::kF32);
    exchange(rows.f32(), send_counts_, by_source.f32(), recv_counts_);
    in = &by_source;
  }
  expert_major.resize({m + tail, C}, DType::kF32);
  for (int64_t q = 0; q < m; ++q)
    std::memcpy(expert_major.f32() + q * C, in->f32() + recv_order_[size_t(q)] * C, size_t(C) * 4);
  if (tail > 0)
    std::memcpy(expert_major.f32() + m * C, rows.f32() + exchanged_ * C, size_t(tail * C) * 4);
}

void MoeLayer::to_home(const Tensor& expert_major, Tensor& rows) {
  const int64_t C = dim_, m = int64_t(recv_order_.size()), kept = send_.dim(0);
  const int64_t tail = kept - exchanged_;
  back_.resize({m, C}, DType::kF32);
  for (int64_t q = 0; q < m; ++q)
    std::memcpy(back_.f32() + recv_order_[size_t(q)] * C, expert_major.f32() + q * C,
                size_t(C) * 4);
  rows.resize({kept, C}, DType::kF32);
  if (ep_ > 1)
    exchange(back_.f32(), recv_counts_, rows.f32(), send_counts_);
  else
    std::memcpy(rows.f32(), back_.f32(), size_t(m * C) * 4);
  if (tail > 0)
    std::memcpy(rows.f32() + exchanged_ * C, expert_major.f32() + m * C, size_t(tail * C) * 4);
}

const Tensor& MoeLayer::forward(const Tensor& x, Context& ctx) {
  const int64_t C = dim_;
  BRAID_CHECK_ARG(x.ndim() >= 2 && x.shape().back() == C,
                  "MoE " + name_ + ": input " + shape_str(x.shape()) + ", expected [..., " +
                      std::to_string(C) + "]");
  const int64_t n = x.numel() / C;
  const int64_t group = x.ndim() == 3 ? x.dim(1) : n;
  const int64_t E = c_.experts, k = c_.top_k;
  x_ = &x;
  router_.forward(x.f32(), n, group);
  const Routing& r = router_.routing();
  plan(r);
  // This rank's chosen rows in dispatch order.
  int64_t kept = 0;
  for (int64_t e = 0; e < E; ++e) kept += r.per_expert[size_t(e)];
  send_.resize({kept, C}, DType::kF32);
  for_kept(r, k, [&](int64_t t, size_t c, int64_t) {
    std::memcpy(send_.f32() + row_[c] * C, x.f32() + t * C, size_t(C) * 4);
  });
  fetch_shadows();
  to_experts(send_, recv_, ein_);
  const Tensor& out = experts_.forward(ein_, local_rows_, ctx);
  to_home(out, ret_);  // backward reads the outputs in dispatch order too
  // Combine: y[t] = Σ_j gate · expert output.
  y_.resize(x.shape(), DType::kF32);
  y_.zero();
  for_kept(r, k, [&](int64_t t, size_t c, int64_t) {
    const float g = r.gate[c];
    const float* o = ret_.f32() + row_[c] * C;
    float* y = y_.f32() + t * C;
    for (int64_t d = 0; d < C; ++d) y[d] += g * o[d];
  });
  return y_;
}

const Tensor& MoeLayer::backward(const Tensor& dy, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "MoE " + name_ + ": backward before forward");
  check_same_shape(dy, y_, "MoE " + name_ + " backward: dy vs y");
  const Routing& r = router_.routing();
  const int64_t C = dim_, n = r.tokens, k = c_.top_k;
  const int64_t kept = send_.dim(0);
  // Counted here, once per trained micro-batch, however often its forward
  // ran (recomputation repeats the same routing).
  moe_count_routing(r.per_expert, n * k, r.dropped, r.aux_sum, n / r.group);
  moe_count_shadows(int64_t(shadow_of_.size()));
  // Per kept choice: the output's gradient gate · dy, and the gate's <dy, output>.
  dret_.resize({kept, C}, DType::kF32);
  dgate_.assign(size_t(n * k), 0.0f);
  for_kept(r, k, [&](int64_t t, size_t c, int64_t) {
    const float g = r.gate[c];
    const float* d = dy.f32() + t * C;
    const float* o = ret_.f32() + row_[c] * C;
    float* dr = dret_.f32() + row_[c] * C;
    double dot = 0;
    for (int64_t i = 0; i < C; ++i) {
      dr[i] = g * d[i];
      dot += double(d[i]) * o[i];
    }
    dgate_[c] = float(dot);
  });
  // Output gradients to the experts' ranks, expert-major there; input
  // gradients home, in dispatch order; the shadows' gradients to their
  // experts' ranks before any expert gradient is marked ready.
  to_experts(dret_, back_, dein_);
  to_home(experts_.backward(dein_, ctx), dsend_);
  return_shadow_grads();
  experts_.params_ready(ctx);
  dx_.resize(x_->shape(), DType::kF32);
  dx_.zero();
  // The aux loss is aux_coef · mean over the global batch's groups; a
  // group is one sample of T = group targets, so 1/groups = loss_scale · T.
  const float aux_grad = c_.aux_coef * ctx.loss_scale * float(r.group);
  router_.backward(x_->f32(), dgate_.data(), aux_grad, input_grad_ ? dx_.f32() : nullptr, ctx);
  for_kept(r, k, [&](int64_t t, size_t c, int64_t) {
    const float* g = dsend_.f32() + row_[c] * C;
    float* d = dx_.f32() + t * C;
    for (int64_t i = 0; i < C; ++i) d[i] += g[i];
  });
  return dx_;
}

void MoeLayer::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&router_.weight());
  experts_.collect_parameters(out);
}

void MoeLayer::release_activations() {
  experts_.release_activations();
  for (Tensor* t : {&send_, &recv_, &ein_, &back_, &ret_, &y_, &dret_, &dein_, &dsend_, &dx_, &lend_})
    t->release();
  x_ = nullptr;
}

}  // namespace braid::nn
