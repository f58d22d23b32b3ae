// Mixture of experts: a sparsely-gated MLP (Shazeer et al.; Switch and
// GShard's routing) as an nn::Module, forward and backward side by side,
// with its experts optionally split over an expert-parallel group.
//
// Routing (Router). A linear gate (no bias) gives each token E logits;
// softmax over them gives p[t, e]; a token goes to its top_k experts (ties
// to the lower index) and the expert's output is weighted by p[t, e] (not
// renormalised over the chosen k, as Switch for k = 1). Tokens are routed
// in groups: one group is one sequence (the T rows of sample b of an input
// [B, T, C]; a 2-D input [N, C] is one group). Each expert takes at most
//   capacity = max(1, ceil(capacity_factor · T · top_k / E))
// tokens of a group. Places are handed out first choices first, then
// second choices, each in token order; a choice that finds its expert full
// is dropped (its token gets nothing from that expert; the block's residual
// still carries it). Because a group is one sample, which tokens drop does
// not depend on how the batch is split over ranks or micro-batches.
//
// Auxiliary load-balancing loss (Switch/GShard), per group:
//   aux_b = E · Σ_e f_e · P_e,
// f_e = the fraction of the group's T·top_k choices that picked e (before
// dropping; not differentiated), P_e = the mean of p[·, e] over the group.
// It is 1 when routing is uniform. The training objective gets
// aux_coef · mean_b aux_b added per MoE layer: backward adds its gradient
// to the gate, scaled so that it is the mean over the GLOBAL batch (it
// reads Context::loss_scale, the trainer's 1/(global batch · targets per
// sample), and assumes T targets per sample, as the GPT has). The reported
// loss is the cross-entropy alone; the aux loss is counted in MoeCounters.
//
// Experts (ExpertSet): E MLPs fc (C → hidden) → GELU → proj (hidden → C),
// no dropout. Parameters are stacked over experts, dimension 0:
//   <name>.gate.weight [E, C]
//   <name>.experts.fc.weight [E, hidden, C], .fc.bias [E, hidden],
//   <name>.experts.proj.weight [E, C, hidden], .proj.bias [E, C].
// Under expert parallelism over a group of n ranks, rank r holds experts
// [r·E/n, (r+1)·E/n): the expert tensors are its block of dimension 0 (its
// slice of the serial model's), the gate is whole on every rank.
//
// Expert parallelism (ExpertExchange). Forward: route this rank's tokens,
// exchange the per-expert counts (all_to_all), send each chosen token's row
// to the rank holding its expert (all_to_all_v), run the local experts on
// what arrived, send the outputs back (all_to_all_v), combine. Backward
// mirrors it: output gradients to the experts, input gradients back.
// Every rank of the group must call forward and backward in the same order
// (a data-parallel group's ranks run the same schedule). The counts are
// all-gathered, so every rank knows every rank's rows per expert and
// computes the same shadow plan (moe_shadow.h, MoeConfig::shadow_rows):
// a shadowed expert's weights go out to the other ranks after the counts
// (all_to_all_v), its rows stay home, and in backward its copies'
// gradients come back to its rank (all_to_all_v) before its gradients are
// marked ready. With no exchange (or a group of one) every expert is
// local and nothing is sent.
//
// Errors: Error(kInvalidArgument) for E < 1, top_k outside [1, E] (named:
// "top-k 3 > experts 2"), capacity_factor ≤ 0, shadow_rows < 0, E not
// divisible by the group size, an input whose width is not C.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/layers.h"
#include "braid/module.h"

namespace braid::nn {

struct MoeConfig {
  int64_t experts = 0;           // E; 0: no MoE
  int top_k = 1;                 // 1 or 2 (any k in [1, E] works)
  float capacity_factor = 1.25f;
  int64_t every = 1;             // every K-th block's MLP is an MoE (blocks K-1, 2K-1, …)
  float aux_coef = 0.01f;        // weight of the load-balancing loss
  // Under expert parallelism: shadow an expert (moe_shadow.h) when that
  // lowers the busiest rank's expert rows by at least this many; 0: never.
  int64_t shadow_rows = 64;
};

// Throws Error(kInvalidArgument) naming what is wrong with `c` over an
// expert-parallel group of `ep` ranks (see the file comment).
void check_moe(const MoeConfig& c, int ep = 1);

// Whether block `l` of a GPT with `c` has an MoE MLP.
inline bool moe_block(const MoeConfig& c, int64_t l) {
  return c.experts > 0 && c.every > 0 && (l + 1) % c.every == 0;
}

// The expert-parallel group's two collectives, as the layer needs them
// (expert_parallel.h makes one over a Communicator). Blocks of
// `send` go to ranks 0 … size-1 in order; block r of `recv` came from rank r.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // all_to_all of `n` int64 per rank.
  virtual void counts(const int64_t* send, int64_t* recv, size_t n) = 0;
  // all_to_all_v of f32 blocks laid end to end; counts in floats.
  virtual void rows(const float* send, const std::vector<size_t>& send_counts, float* recv,
                    const std::vector<size_t>& recv_counts) = 0;
};

// One forward's routing of N tokens.
struct Routing {
  int64_t tokens = 0, group = 0;   // N and T
  std::vector<int32_t> expert;     // [N·k] choice j of token t at t·k + j
  std::vector<float> gate;         // [N·k] p[t, expert]
  std::vector<int64_t> slot;       // [N·k] row in the expert-major dispatch order; -1: dropped
  std::vector<int64_t> per_expert; // [E] rows kept per expert (this rank's tokens)
  std::vector<float> choice_frac;  // [groups·E] f_e of each group
  int64_t dropped = 0;             // choices dropped
  double aux_sum = 0;              // Σ over groups of aux_b
};

class Router {
 public:
  Router(std::string name, int64_t dim, const MoeConfig& c);
  // x: [N, C] rows in groups of `group`. Fills routing().
  void forward(const float* x, int64_t n, int64_t group);
  // dgate: [N·k] dL/d(gate value) of each choice (0 where dropped);
  // aux_grad: the factor of the aux loss per group (aux_coef / groups of
  // the global batch). Adds dL/dx into dx [N, C]; accumulates the gate's
  // gradient.
  void backward(const float* x, const float* dgate, float aux_grad, float* dx, Context& ctx);
  const Routing& routing() const { return r_; }
  Parameter& weight() { return w_; }
  int64_t capacity(int64_t group) const;

 private:
  int64_t dim_, experts_;
  MoeConfig c_;
  Parameter w_;
  Tensor probs_, dprobs_;
  Routing r_;
};

// `count` experts (global indices first … first+count-1) stacked, and
// while a forward's plan says so, shadows: copies of other ranks' experts
// (moe_shadow.h), run after the held ones on rows of their own.
class ExpertSet {
 public:
  ExpertSet(std::string name, int64_t dim, int64_t hidden, int64_t first, int64_t count);
  // Floats of one expert packed [fc.weight | fc.bias | proj.weight | proj.bias].
  int64_t packed_size() const;
  // Room for `n` shadows' packed weights (until the next call or release);
  // the caller fills it before forward.
  float* shadow_weights(int64_t n);
  // Held expert i's weights, packed, into out[packed_size()].
  void pack_weights(int64_t i, float* out) const;
  // Adds a packed gradient (a shadow's, from another rank) to held expert i's.
  void add_packed_grad(int64_t i, const float* g);
  // x: [M, C] rows expert-major: rows[i] of held expert i, then rows[count
  // + j] of shadow j. Returns [M, C].
  const Tensor& forward(const Tensor& x, const std::vector<int64_t>& rows, Context& ctx);
  // dy: [M, C]; returns dL/dx [M, C]; accumulates the held experts'
  // gradients and sets the shadows' (shadow_grads()). Marks nothing ready:
  // params_ready() does, once the shadows' gradients have been added.
  const Tensor& backward(const Tensor& dy, Context& ctx);
  // [shadows, packed_size()] the shadows' gradients of the last backward.
  const Tensor& shadow_grads() const { return shadow_g_; }
  void params_ready(Context& ctx);
  void collect_parameters(std::vector<Parameter*>& out);
  void release_activations();
  int64_t first() const { return first_; }
  int64_t count() const { return count_; }

 private:
  struct View {
    const float *w1, *b1, *w2, *b2;
    float *gw1, *gb1, *gw2, *gb2;
  };
  View view(int64_t i);  // held expert i < count, else shadow i - count
  int64_t dim_, hidden_, first_, count_;
  Parameter w1_, b1_, w2_, b2_;
  const Tensor* x_ = nullptr;
  std::vector<int64_t> rows_;
  Tensor h_, a_, y_, dh_, dpre_, dx_;  // fc + bias, GELU(h_), proj; dL/da, dL/dh
  int64_t shadows_ = 0;
  Tensor shadow_w_, shadow_g_;
};

// The MoE MLP: [B, T, C] (or [N, C]) → same shape. `exchange` null: all
// experts local.
class MoeLayer : public Module {
 public:
  MoeLayer(std::string name, int64_t dim, int64_t hidden, const MoeConfig& c,
           std::shared_ptr<ExpertExchange> exchange = nullptr);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  const Router& router() const { return router_; }
  // Whether `p` is one of the stacked expert tensors (split over ep).
  static bool is_expert_param(const std::string& name);

 private:
  // Rows in dispatch order (this rank's choices) to the experts' ranks
  // (`by_source`: what arrived, by sending rank), then expert-major, then
  // the rows this rank keeps for its shadows.
  void to_experts(const Tensor& rows, Tensor& by_source, Tensor& expert_major);
  // Expert-major rows back to the ranks whose tokens they are, into `rows`
  // in dispatch order (the shadows' rows copied).
  void to_home(const Tensor& expert_major, Tensor& rows);
  // Sends `send` (blocks per rank) and receives into `recv`, timing it.
  void exchange(const float* send, const std::vector<size_t>& send_counts, float* recv,
                const std::vector<size_t>& recv_counts);
  // All ranks' rows per expert, the shadow plan, and the dispatch order.
  void plan(const Routing& r);
  // The shadows' weights from their ranks; their gradients back to them.
  void fetch_shadows();
  void return_shadow_grads();
  MoeConfig c_;
  int64_t dim_;
  std::shared_ptr<ExpertExchange> ex_;
  int ep_ = 1, ep_rank_ = 0;
  Router router_;
  ExpertSet experts_;
  const Tensor* x_ = nullptr;
  // Dispatch order: slot order with the rows of experts this rank shadows
  // (held elsewhere) moved to the end, `exchanged_` rows before them.
  std::vector<int64_t> row_;         // [N·k] dispatch row of each kept choice; -1: dropped
  int64_t exchanged_ = 0;
  std::vector<int64_t> all_counts_;  // [ep · E] rows rank s routes to expert e
  std::vector<char> shadowed_;       // [E] the plan
  std::vector<int64_t> shadow_of_;   // global index of each shadow this rank runs
  int64_t lent_ = 0;                 // shadowed experts this rank holds
  // Per rank of the group: floats sent/received in dispatch (the combine
  // and the backward reverse them).
  std::vector<size_t> send_counts_, recv_counts_;
  std::vector<int64_t> local_rows_;  // rows per local expert after dispatch, then per shadow
  std::vector<int64_t> recv_order_;  // expert-major row → row of recv_
  Tensor send_;   // [kept, C] this rank's chosen rows, dispatch order
  Tensor recv_;   // rows that came for the local experts, by source rank
  Tensor ein_;    // recv_ expert-major, then the shadows' rows (the experts' input)
  Tensor back_;   // expert outputs (backward: gradients) by source rank
  Tensor ret_;    // expert outputs back home, dispatch order
  Tensor y_;
  Tensor dret_;   // gate · dy per kept choice, dispatch order
  Tensor dein_;   // output gradients expert-major
  Tensor dsend_;  // input gradients back home, dispatch order
  Tensor dx_;
  Tensor lend_;   // packed weights (backward: gradients) of lent experts, per rank
  std::vector<float> dgate_;
};

// A pre-norm transformer block whose MLP is an MoeLayer (make_gpt builds
// it for the blocks moe_block() picks).
class MoeTransformerBlock : public Module {
 public:
  MoeTransformerBlock(std::string name, int64_t dim, int64_t heads, const MoeConfig& c,
                      float dropout, uint64_t dropout_key, bool recompute,
                      std::shared_ptr<ExpertExchange> exchange = nullptr);
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    return res_.forward(x, ctx, recompute_);
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    return res_.backward(dy, ctx, recompute_);
  }
  void collect_parameters(std::vector<Parameter*>& out) override { res_.collect_parameters(out); }
  void release_activations() override { res_.release_activations(); }
  MoeLayer& moe() { return moe_; }

 private:
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  MoeLayer moe_;
  bool recompute_;
  PreNormResidual res_{name_, ln1_, attn_, ln2_, moe_};
};

}  // namespace braid::nn
