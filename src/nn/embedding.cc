// Token + position embedding, forward (gather) and backward (scatter-add).
#include "braid/error.h"
#include "braid/layers.h"

namespace braid::nn {

Embedding::Embedding(std::string name, int64_t vocab, int64_t dim, int64_t context)
    : Module(std::move(name)),
      vocab_(vocab),
      dim_(dim),
      context_(context),
      wte_(name_ + ".wte", {vocab, dim}),
      wpe_(name_ + ".wpe", {context, dim}) {
  BRAID_CHECK_ARG(vocab > 0 && dim > 0 && context > 0,
                  "Embedding " + name_ + ": sizes must be positive");
  input_grad_ = false;
}

void Embedding::check_tokens(const std::string& layer, const Tensor& tokens, int64_t vocab,
                             int64_t context) {
  if (tokens.ndim() != 2 || tokens.dim(1) > context)
    throw Error(Errc::kInvalidArgument, "Embedding " + layer + ": tokens " +
                                            shape_str(tokens.shape()) + " vs expected [*, <=" +
                                            std::to_string(context) + "]");
  const int32_t* tok = tokens.i32();
  for (int64_t i = 0; i < tokens.numel(); ++i)
    if (tok[i] < 0 || tok[i] >= vocab)
      throw Error(Errc::kInvalidArgument, "Embedding " + layer + ": token " +
                                              std::to_string(tok[i]) + " outside vocabulary [0, " +
                                              std::to_string(vocab) + ")");
}

const Tensor& Embedding::forward(const Tensor& x, Context&) {
  check_tokens(name_, x, vocab_, context_);
  int64_t B = x.dim(0), T = x.dim(1);
  const int32_t* tok = x.i32();
  y_.resize({B, T, dim_}, DType::kF32);
  const float* wte = wte_.data.f32();
  const float* wpe = wpe_.data.f32();
  float* y = y_.f32();
  for (int64_t i = 0; i < B * T; ++i) {
    const float* e = wte + int64_t(tok[i]) * dim_;
    const float* p = wpe + (i % T) * dim_;
    float* yr = y + i * dim_;
    for (int64_t c = 0; c < dim_; ++c) yr[c] = e[c] + p[c];
  }
  x_ = &x;
  return y_;
}

const Tensor& Embedding::backward(const Tensor& dy, Context& ctx) {
  BRAID_CHECK_ARG(x_ != nullptr, "Embedding " + name_ + ": backward before forward");
  check_same_shape(dy, y_, "Embedding " + name_ + " backward: dy vs y");
  int64_t T = x_->dim(1), n = x_->numel();
  const int32_t* tok = x_->i32();
  float* gte = wte_.grad.f32();
  float* gpe = wpe_.grad.f32();
  const float* d = dy.f32();
  for (int64_t i = 0; i < n; ++i) {
    float* a = gte + int64_t(tok[i]) * dim_;
    float* b = gpe + (i % T) * dim_;
    const float* dr = d + i * dim_;
    for (int64_t c = 0; c < dim_; ++c) {
      a[c] += dr[c];
      b[c] += dr[c];
    }
  }
  ctx.param_ready(wte_);
  ctx.param_ready(wpe_);
  return empty_;
}

void Embedding::collect_parameters(std::vector<Parameter*>& out) {
  out.push_back(&wte_);
  out.push_back(&wpe_);
}

void Embedding::release_activations() { y_.release(); }

}  // namespace braid::nn
