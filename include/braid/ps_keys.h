// The parameter server's keys and rules, the same on every process of a job:
// the Layout of keys over servers, the consistency model and the servers'
// update rule (docs/PS.md says how each behaves).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::ps {

using KeyId = uint32_t;

enum class Consistency { kBsp, kAsp, kSsp, kRoundK };
enum class LatePolicy { kDrop, kFold };
// "bsp" | "asp" | "ssp" | "kofn"; throws Error(kInvalidArgument) otherwise.
Consistency parse_consistency(const std::string& s);
const char* consistency_name(Consistency c);

// Server-side update rule. Formulas equal braid::nn's optimizers (optim.h):
//  kSgd:     g' = g + wd·w; buf = μ·buf + g'; w −= lr·buf   (μ = 0: w −= lr·g')
//  kAdagrad: g' = g + wd·w; h += g'²; w −= lr·g' / (√h + eps)   (PyTorch)
//  kAdamW:   w ·= 1 − lr·wd; m, v moving averages; bias-corrected step
//            (wd = 0 is Adam).
// Weight decay applies only to keys registered with decay = true.
struct UpdateRule {
  enum Kind { kSgd, kAdagrad, kAdamW } kind = kSgd;
  float momentum = 0, weight_decay = 0;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  // State floats kept per parameter element: 0/1 (sgd), 1 (adagrad), 2 (adamw).
  int slots() const;
};
// "sgd" | "adagrad" | "adam" | "adamw"; throws Error(kInvalidArgument).
UpdateRule::Kind parse_update_rule(const std::string& s);

struct KeySpec {
  std::string name;
  bool sparse = false;
  int64_t size = 0;   // dense: elements
  int64_t rows = 0;   // sparse: rows, each `width` floats
  int64_t width = 0;
  bool decay = true;  // weight decay applies
};

// The job's keys and their placement over `servers` servers.
class Layout {
 public:
  explicit Layout(int servers);
  // Registration order gives the ids. Throws kInvalidArgument for an empty
  // or duplicate name or a non-positive size.
  KeyId add_dense(const std::string& name, int64_t size, bool decay = true);
  KeyId add_sparse(const std::string& name, int64_t rows, int64_t width, bool decay = true);

  int servers() const { return servers_; }
  size_t size() const { return keys_.size(); }
  // Throws kInvalidArgument naming the id when unknown.
  const KeySpec& key(KeyId k) const;
  // Dense: server s's slice [begin, end) of key k (may be empty).
  int64_t slice_begin(KeyId k, int s) const;
  int64_t slice_end(KeyId k, int s) const { return slice_begin(k, s + 1); }
  // Sparse: the server that owns `row` (no range check).
  int row_server(int64_t row) const;
  // Elements per server over all dense keys (load balance of the layout).
  std::vector<int64_t> dense_elements_per_server() const;

 private:
  int servers_;
  std::vector<KeySpec> keys_;
};

}  // namespace braid::ps
