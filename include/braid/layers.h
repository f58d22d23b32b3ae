// The layers. Each one's forward and backward stand side by side in one
// .cc file under src/nn/ (llm.c style). Shapes: leading dimensions are
// flattened into rows; the last dimension is the feature dimension.
//
// Cost notes: Linear is one sgemm forward and two backward (dW, dx; dx is
// skipped when !input_grad()); the rest are O(elements) loops, attention
// adds four small GEMMs per (sample, head) forward and six backward.
#pragma once

#include "braid/module.h"

namespace braid::nn {

// y = x Wᵀ + b. W: [out, in] (PyTorch layout), b: [out].
//
// With an activation (set_activation(kGelu); needs the bias) the layer is
// Linear then GELU fused (llm.c's matmul + bias + GELU): forward returns
// GELU(x Wᵀ + b), adding the bias and applying GELU in one pass over the
// GEMM's output, and backward takes dL/d(that), forming dL/d(x Wᵀ + b)
// and the bias gradient in one pass. Same values as the two layers (to
// rounding), same parameters and names.
class Linear : public Module {
 public:
  enum class Activation { kNone, kGelu };
  Linear(std::string name, int64_t in, int64_t out, bool bias = true);
  // Throws Error(kInvalidArgument) for kGelu on a layer without bias.
  void set_activation(Activation a);
  Activation activation() const { return act_; }
  // For an owner whose readers of this layer's output all take bf16 (its
  // own next Linear, the attention core): the output is then kept in
  // activation_dtype() (precision.h), i.e. bf16 under Precision::kBF16 —
  // for GEMM readers the rounding they apply anyway, at half the bytes.
  // With the GELU, its input (which the backward reads) is kept so too.
  // set_bf16_input_grad: the same for the input gradient backward returns.
  // The input x and the gradient dy may be f32 or bf16 in any case.
  void set_bf16_output(bool on) { bf16_output_ = on; }
  void set_bf16_input_grad(bool on) { bf16_input_grad_ = on; }
  // For an owner that reads the output at once and is done with it before
  // another such layer runs on this thread (a pre-norm block's output
  // projections, added into the residual stream straight away; backward
  // reads only the output's shape): the f32 output goes to one buffer that
  // every Linear so set shares per thread, instead of one buffer each.
  // Without an activation or bf16 output only (they are kept for backward).
  void set_shared_output(bool on);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  Parameter& weight() { return w_; }
  Parameter* bias() { return has_bias_ ? &b_ : nullptr; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  Activation act_ = Activation::kNone;
  bool bf16_output_ = false, bf16_input_grad_ = false, shared_output_ = false;
  Parameter w_, b_;
  const Tensor* x_ = nullptr;
  Shape y_shape_;  // the last forward's output shape
  Tensor y_, dx_;
  Tensor a_, dpre_;  // with an activation: its output; dL/d(x Wᵀ + b)
                     // (bf16 under Precision::kBF16: it feeds GEMMs alone)
};

class ReLU : public Module {
 public:
  explicit ReLU(std::string name) : Module(std::move(name)) {}
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void release_activations() override;

 private:
  Tensor y_, dx_;
};

// GELU, tanh approximation (GPT-2's; PyTorch GELU(approximate="tanh")).
class GELU : public Module {
 public:
  explicit GELU(std::string name) : Module(std::move(name)) {}
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void release_activations() override;

 private:
  const Tensor* x_ = nullptr;
  Tensor y_, dx_;
};

// Normalises each row over the last dimension; gain γ (ones), bias β (zeros).
class LayerNorm : public Module {
 public:
  LayerNorm(std::string name, int64_t dim, float eps = 1e-5f);
  // As Linear::set_bf16_output: for an owner whose readers of the
  // output are GEMMs alone (a transformer block's qkv and fc), kept in
  // activation_dtype(). The input x stays f32; dy may be f32 or bf16.
  void set_bf16_output(bool on) { bf16_output_ = on; }
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;

  // The residual add fused with the norm, for a pre-norm block
  // (h = x + a, then ln(h)): forward_add writes h = x + a (f32) and
  // returns ln(h), one pass over each row; h must outlive the backward.
  // backward_add writes dx = res + lnᵀ(dy) in one pass, without an input
  // gradient of its own; dx may be res itself. The values are those of
  // vadd then forward, and backward then vadd.
  const Tensor& forward_add(const Tensor& x, const Tensor& a, Tensor& h, Context& ctx);
  void backward_add(const Tensor& dy, const Tensor& res, Tensor& dx, Context& ctx);

 private:
  const Tensor& normalize(const Tensor& x, const float* a, Tensor* h);
  void run_backward(const Tensor& dy, const float* res, float* dx, Context& ctx);
  int64_t dim_;
  float eps_;
  bool bf16_output_ = false;
  Parameter g_, b_;
  const Tensor* x_ = nullptr;
  Tensor y_, mean_, rstd_, dx_;
};

// Token + position embedding: i32 tokens [B, T] → f32 [B, T, C],
// y[b,t] = wte[tokens[b,t]] + wpe[t]. T ≤ context. No input gradient.
class Embedding : public Module {
 public:
  Embedding(std::string name, int64_t vocab, int64_t dim, int64_t context);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  // Throws Error(kInvalidArgument) naming `layer` unless tokens is
  // [B, T <= context] with every id in [0, vocab). Every embedding (the
  // serial one, the vocab-parallel one) checks its input so.
  static void check_tokens(const std::string& layer, const Tensor& tokens, int64_t vocab,
                           int64_t context);

 private:
  int64_t vocab_, dim_, context_;
  Parameter wte_, wpe_;
  const Tensor* x_ = nullptr;
  Tensor y_, empty_;
};

// A bag of table rows per sample, pooled: ids i32 [B, bag] → f32 [B, dim],
// y[b] = Σ_j W[ids[b, j]] (kSum), or that sum over the bag's count of real
// ids (kMean; a bag of padding only gives zeros). An id of −1 is padding,
// so bags of different lengths share one fixed width. Any other id outside
// [0, rows) throws Error(kInvalidArgument) naming the layer and the id. No
// input gradient. W: [rows, dim], `decay` false (a sparse update cannot
// decay the rows a batch did not touch, so no optimizer should).
//
// Backward gives dL/dW in two forms:
//  - sparse, always: touched_rows() are the distinct ids of the last
//    forward, ascending, and row_grads() is f32 [touched_rows().size(),
//    dim] whose row i is the gradient of table row touched_rows()[i]
//    (every occurrence in the batch summed). Overwritten by each backward,
//    not accumulated. This is what a parameter-server worker pushes: keys
//    touched_rows(), values row_grads(), nothing for rows the batch missed.
//  - dense, when dense_grad() (the default): the same rows also added (+=)
//    into weight().grad, so the table trains like any parameter (data
//    parallel all-reduces the whole table). A PS worker turns it off.
// Cost: forward O(B·bag·dim); backward O(B·bag·(dim + log U)) with U the
// touched rows, plus a sort of the batch's ids.
class EmbeddingBag : public Module {
 public:
  enum class Mode { kSum, kMean };
  EmbeddingBag(std::string name, int64_t rows, int64_t dim, Mode mode = Mode::kSum);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  Parameter& weight() { return w_; }
  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  Mode mode() const { return mode_; }
  void set_dense_grad(bool on) { dense_grad_ = on; }
  bool dense_grad() const { return dense_grad_; }
  const std::vector<int64_t>& touched_rows() const { return touched_; }
  const Tensor& row_grads() const { return row_grads_; }

 private:
  int64_t rows_, dim_;
  Mode mode_;
  bool dense_grad_ = true;
  Parameter w_;
  const Tensor* x_ = nullptr;
  Tensor y_, empty_;
  std::vector<int64_t> touched_;
  Tensor row_grads_;
};

// Inverted dropout with a counter-based mask: element e of global sample s
// is kept iff uniform(seed, step, s, key·2^40 + e) ≥ p, where key is this
// layer's id. Rows of dim 0 are samples (row r is sample ctx.sample_offset
// + r), so the mask does not depend on how the batch is split. Identity
// when p == 0 or !ctx.training. A layer that holds only part of each
// sample (a sequence-parallel shard) sets the sample-relative index of its
// first element with set_element_offset, so that element i of its row is
// element offset + i of the whole sample and gets the same mask.
class Dropout : public Module {
 public:
  Dropout(std::string name, float p, uint64_t key);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void release_activations() override;
  float p() const { return p_; }
  uint64_t key() const { return key_; }
  void set_element_offset(int64_t offset) { element_offset_ = offset; }

 private:
  float p_;
  uint64_t key_;
  int64_t element_offset_ = 0;
  bool active_ = false;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_;
};

// Causal multi-head self-attention on [B, T, C]: qkv = x W_qkvᵀ + b,
// per head softmax(q kᵀ / √d_head + causal mask) v, then an output
// projection, then dropout (p, resid) on the output. Dropout p applies to
// the probabilities too (GPT-2's attn_pdrop), fused into the softmax's
// pass: (softmax(…) ⊙ M) v. Under
// Precision::kBF16 its activations and the input gradient backward
// returns are kept in bf16 (precision.h's activation_dtype(); LayerNorm's
// backward takes that).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::string name, int64_t dim, int64_t heads, float dropout = 0,
                      uint64_t dropout_key = 0);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  void set_input_grad(bool needed) override;
  // The output projection's, as Linear::set_shared_output.
  void set_shared_output(bool on) { proj_.set_shared_output(on); }

 private:
  int64_t dim_, heads_;
  Linear qkv_, proj_;
  Dropout drop_;
  const Tensor* qkv_out_ = nullptr;  // qkv_'s output (owned by qkv_)
  Tensor att_;   // [B, H, T, T] softmax probabilities
  Tensor o_;     // [B, T, C] attention output before projection
  Tensor dqkv_, datt_;
};

// fc (C → hidden) → GELU → proj (hidden → C) → dropout; fc and GELU run
// fused (Linear::Activation::kGelu). Activations and the input gradient
// kept in bf16 under Precision::kBF16, as CausalSelfAttention's.
class MlpBlock : public Module {
 public:
  MlpBlock(std::string name, int64_t dim, int64_t hidden, float dropout = 0,
           uint64_t dropout_key = 0);
  const Tensor& forward(const Tensor& x, Context& ctx) override;
  const Tensor& backward(const Tensor& dy, Context& ctx) override;
  void collect_parameters(std::vector<Parameter*>& out) override;
  void release_activations() override;
  void set_input_grad(bool needed) override;
  // The output projection's, as Linear::set_shared_output.
  void set_shared_output(bool on) { proj_.set_shared_output(on); }

 private:
  Linear fc_;  // with the GELU
  Linear proj_;
  Dropout drop_;
};

// Pre-norm transformer block: x + attn(ln1(x)), then + mlp(ln2(·)).
// With recompute, forward keeps only its input and output; backward runs
// forward again (same dropout masks, same kernels) and then backward, so
// gradients are bitwise identical to the stored-activation path; then it
// frees what it ran, so one block's activations are live at a time.
// The pre-norm residual wiring of a transformer block over any four
// sublayers,
//   h = x + attn(ln1(x)),  y = h + mlp(ln2(h)),
// with optional recomputation: forward then keeps only x's address and
// backward runs the forward again first (same inputs, same ctx — dropout
// keys — same kernels: same activations). The serial and the
// tensor-parallel blocks own their sublayers and delegate to it.
class PreNormResidual {
 public:
  PreNormResidual(const std::string& block, LayerNorm& ln1, Module& attn, LayerNorm& ln2,
                  Module& mlp)
      : block_(block), ln1_(ln1), attn_(attn), ln2_(ln2), mlp_(mlp) {}
  const Tensor& forward(const Tensor& x, Context& ctx, bool recompute);
  const Tensor& backward(const Tensor& dy, Context& ctx, bool recompute);
  void collect_parameters(std::vector<Parameter*>& out);
  void release_activations();

 private:
  void run_forward(const Tensor& x, Context& ctx, bool need_y);
  void release_sublayers();  // their activations and gradient buffers, and h_
  const std::string& block_;
  LayerNorm& ln1_;
  Module& attn_;
  LayerNorm& ln2_;
  Module& mlp_;
  const Tensor* x_ = nullptr;
  Tensor h_;    // x + attn(ln1(x))
  Tensor y_;    // h + mlp(ln2(h))
  Tensor dh_;   // dL/dh, then (in place) dL/dx, which backward returns
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(std::string name, int64_t dim, int64_t heads, float dropout = 0,
                   uint64_t dropout_key = 0, bool recompute = false);
  const Tensor& forward(const Tensor& x, Context& ctx) override {
    return res_.forward(x, ctx, recompute_);
  }
  const Tensor& backward(const Tensor& dy, Context& ctx) override {
    return res_.backward(dy, ctx, recompute_);
  }
  void collect_parameters(std::vector<Parameter*>& out) override { res_.collect_parameters(out); }
  void release_activations() override { res_.release_activations(); }
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

 private:
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  MlpBlock mlp_;
  bool recompute_;
  PreNormResidual res_{name_, ln1_, attn_, ln2_, mlp_};
};

}  // namespace braid::nn
