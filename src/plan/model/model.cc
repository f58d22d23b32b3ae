// Model descriptions: parameters and multiply-adds per layer. The GPT's
// counts follow nn::make_gpt module by module (src/nn/models.cc); the
// multiply-adds per token are parallel::gpt_spec's unit_costs, so
// the planner's pipeline cut and braid's weigh the modules alike.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "braid/error.h"
#include "braid/model_spec.h"
#include "braid/models.h"
#include "braid/partition.h"
#include "braid/plan_model.h"

namespace braid::plan {
namespace {

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw Error(Errc::kInvalidArgument, "model '" + spec + "': " + why);
}

// Largest accepted values: far past any model's, and small enough that
// nothing the planner computes from them overflows or allocates without
// bound (one entry per layer and per table; DLRM's pairwise interaction is
// tables²/2).
constexpr int64_t kMaxCount = 100000;          // layers, tables
constexpr int64_t kMaxSize = int64_t(1) << 31;  // widths, heads, seq, vocab, sizes
constexpr int64_t kMaxRows = int64_t(1) << 40;  // rows of an embedding table

int64_t number(const std::string& spec, const std::string& key, const std::string& v, int64_t max = kMaxSize) {
  long long n = 0;
  try {
    size_t used = 0;
    n = std::stoll(v, &used);
    if (used != v.size() || n < 1) throw std::invalid_argument(v);
  } catch (const std::exception&) {
    bad(spec, key + "=" + v + ": expected a whole number >= 1");
  }
  if (n > max) bad(spec, key + "=" + v + ": at most " + std::to_string(max));
  return int64_t(n);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

// "k=v,k=v" → map; every key must be in `allowed`.
std::map<std::string, std::string> keyvals(const std::string& spec, const std::string& body,
                                           const std::vector<std::string>& allowed) {
  std::map<std::string, std::string> kv;
  for (const std::string& item : split(body, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) bad(spec, "'" + item + "': expected key=value");
    const std::string k = item.substr(0, eq);
    bool ok = false;
    std::string list;
    for (const std::string& a : allowed) {
      ok = ok || a == k;
      list += (list.empty() ? "" : ", ") + a;
    }
    if (!ok) bad(spec, "unknown key '" + k + "' (expected: " + list + ")");
    kv[k] = item.substr(eq + 1);
  }
  return kv;
}

void add_linear(ModelDesc& m, const std::string& name, int64_t in, int64_t out, bool bias = true) {
  // Its output and the activation after it.
  m.layers.push_back({name, double(in) * out + (bias ? out : 0), double(in) * out, false, 2.0 * out});
}

std::vector<int64_t> sizes_of(const std::string& spec, const std::string& key, const std::string& v) {
  std::vector<int64_t> out;
  for (const std::string& s : split(v, '/')) out.push_back(number(spec, key, s));
  return out;
}

}  // namespace

double ModelDesc::params() const {
  double p = 0;
  for (const LayerDesc& l : layers) p += l.params;
  return p;
}

double ModelDesc::forward_flops_per_sample() const {
  double f = 0;
  for (const LayerDesc& l : layers) f += 2 * l.macs;
  return f;
}

ModelDesc describe_gpt(const GptShape& g) {
  auto need = [&](int64_t v, const char* field) {
    if (v < 1) throw Error(Errc::kInvalidArgument, std::string("gpt: ") + field + " must be >= 1");
  };
  need(g.layers, "layers");
  need(g.hidden, "hidden");
  need(g.heads, "heads");
  need(g.seq, "seq");
  need(g.vocab, "vocab");
  need(g.mlp_ratio, "mlp");
  if (g.hidden % g.heads != 0)
    throw Error(Errc::kInvalidArgument, "gpt: hidden " + std::to_string(g.hidden) +
                                            " is not a multiple of heads " + std::to_string(g.heads));
  ModelDesc m;
  m.kind = "gpt";
  m.gpt = g;
  m.tokens_per_sample = double(g.seq);
  const double h = double(g.hidden), S = double(g.seq), V = double(g.vocab), r = double(g.mlp_ratio);
  // Per sample = per token × S. Embedding and layer norms are element-wise
  // (unit_costs weighs them 2h and 5h per token).
  m.layers.push_back({"emb", V * h + S * h, S * 2 * h, false});
  for (int64_t i = 0; i < g.layers; ++i) {
    // qkv (3h² + 3h), proj (h² + h), fc (r·h² + r·h), fc2 (r·h² + h),
    // two layer norms (4h); attention scores and mixing 2·S·h per token.
    const double params = (4 + 2 * r) * h * h + (9 + r) * h;
    m.layers.push_back({"h." + std::to_string(i), params, S * ((4 + 2 * r) * h * h + 2 * S * h), true});
  }
  m.layers.push_back({"ln_f", 2 * h, S * 5 * h, false});
  m.layers.push_back({"lm_head", h * V, S * h * V, false});
  return m;
}

BlockActivations gpt_block_activations(const GptShape& g) {
  const double h = double(g.hidden), r = double(g.mlp_ratio);
  return {4 * h, (4 + 2 * r) * h, double(g.heads) * double(g.seq), h};
}

std::vector<int64_t> gpt_stage_blocks(const GptShape& g, int stages, Runtime runtime) {
  std::vector<int64_t> n(size_t(stages), g.layers / stages);
  if (runtime == Runtime::kMegatron) {
    for (int v = 1; v <= int(g.layers % stages); ++v) ++n[size_t(v)];
    return n;
  }
  nn::GptConfig c;
  c.vocab = g.vocab;
  c.context = g.seq;
  c.layers = g.layers;
  c.dim = g.hidden;
  c.heads = g.heads;
  const std::vector<size_t> bounds =
      parallel::partition_layers(parallel::gpt_spec(c, 0)->unit_costs(), stages);
  for (int v = 0; v < stages; ++v) {
    // Units 1..layers are the blocks.
    const int64_t lo = std::max<int64_t>(int64_t(bounds[size_t(v)]), 1);
    const int64_t hi = std::min<int64_t>(int64_t(bounds[size_t(v) + 1]), g.layers + 1);
    n[size_t(v)] = std::max<int64_t>(0, hi - lo);
  }
  return n;
}

BraidActivations gpt_braid_activations(const GptShape& g, int tp, bool sp, bool spec_built) {
  const double h = double(g.hidden), r = double(g.mlp_ratio), V = double(g.vocab);
  const double n = tp, scores = 2 * double(g.heads) * double(g.seq);  // probabilities, gradient
  // Split over tp: q, k, v and dqkv (6h), the context (h), the projection's
  // input gradient (h), the MLP's hidden output, GELU's output and
  // gradient and the second projection's input gradient (4·R·h).
  const double sharded = (8 + 4 * r) * h;
  // Full width on every rank: the layer norms' outputs (2h; the residual
  // add is fused into their backward, so they keep no input gradient), the
  // input gradients of qkv and fc (2h), the residual sums and their
  // gradients (4h): 8h. The serial blocks' two projections share one
  // output buffer (Linear::set_shared_output); the tp layers' keep theirs
  // (2h) and add the row-parallel projections' summed outputs (2h); on a
  // group of more than one, also the sums CopyToTp and ReduceFromTp keep
  // (4h). Under sequence parallelism the norms, residuals, the gathers'
  // gradients and the reduce-scatters' and bias adds' outputs hold this
  // rank's positions (12h ÷ tp), while the gathered inputs, the gathers'
  // staging and the projections' full outputs and gradients are whole (12h).
  double full = 8 * h, split = 0;
  if (sp && tp > 1) {
    full = 12 * h;
    split = 12 * h;
  } else if (spec_built) {
    full += tp > 1 ? 8 * h : 4 * h;
  }
  BraidActivations a;
  a.block = full + (split + sharded + scores) / n;
  a.selective = full + (split + sharded) / n;
  a.input = 2 * h / (sp ? n : 1);
  // Embedding: its output; the tp layer's partial sum too (and on a group
  // of more than one the reduced sum; under sp that sum's staging and the
  // gathered gradient are whole, the output this rank's positions).
  if (!spec_built) a.first = h;
  else if (tp == 1) a.first = 2 * h;
  else a.first = sp ? 3 * h + 2 * h / n : 3 * h;
  // ln_f's output and gradient, the head's input gradient (and on tp > 1
  // its summed copy; under sp the gathered input and staging), the logits,
  // the loss's probabilities and dL/dlogits.
  if (tp == 1) a.last = 3 * h + 3 * V;
  else a.last = (sp ? 3 * h + 3 * h / n : 4 * h) + 3 * V / n;
  return a;
}

ModelDesc describe_mlp(const std::vector<int64_t>& sizes) {
  if (sizes.size() < 2) throw Error(Errc::kInvalidArgument, "mlp: needs at least two sizes");
  ModelDesc m;
  m.kind = "mlp";
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (sizes[i] < 1 || sizes[i + 1] < 1)
      throw Error(Errc::kInvalidArgument, "mlp: sizes must be >= 1");
    add_linear(m, "fc" + std::to_string(i), sizes[i], sizes[i + 1]);
  }
  return m;
}

ModelDesc describe_dlrm(const DlrmShape& d) {
  ModelDesc m;
  m.kind = "dlrm";
  int64_t in = d.dense;
  int i = 0;
  std::vector<int64_t> bottom = d.bottom;
  bottom.push_back(d.dim);
  for (int64_t out : bottom) {
    add_linear(m, "bottom." + std::to_string(i++), in, out);
    in = out;
  }
  // Lookups move bytes, not FLOPs: a bag's sum is bag × dim adds.
  for (int64_t t = 0; t < d.tables; ++t)
    m.layers.push_back({"table." + std::to_string(t), double(d.rows) * d.dim,
                        double(d.bag > 1 ? (d.bag - 1) * d.dim : 0) / 2, false, double(d.dim)});
  const int64_t v = d.tables + 1;
  m.layers.push_back({"interaction", 0, double(v * (v - 1) / 2 * d.dim), false,
                      double(d.dim + v * (v - 1) / 2)});
  in = d.dim + v * (v - 1) / 2;
  i = 0;
  std::vector<int64_t> top = d.top;
  top.push_back(1);
  for (int64_t out : top) {
    add_linear(m, "top." + std::to_string(i++), in, out);
    in = out;
  }
  return m;
}

ModelDesc parse_model(const std::string& spec) {
  static const std::map<std::string, GptShape> presets = {
      {"gpt-18b", {40, 6144, 48, 2048, 51200, 4}},
      {"gpt-175b", {96, 12288, 96, 2048, 51200, 4}},
      {"gpt-530b", {105, 20480, 128, 2048, 51200, 4}},
      {"gpt-1t", {128, 25600, 160, 2048, 51200, 4}},
  };
  if (auto it = presets.find(spec); it != presets.end()) {
    ModelDesc m = describe_gpt(it->second);
    m.spec = spec;
    return m;
  }
  const size_t colon = spec.find(':');
  if (colon == std::string::npos)
    bad(spec, "expected gpt:..., mlp:..., dlrm:... or a preset (gpt-18b, gpt-175b, gpt-530b, gpt-1t)");
  const std::string kind = spec.substr(0, colon), body = spec.substr(colon + 1);
  ModelDesc m;
  if (kind == "gpt") {
    auto kv = keyvals(spec, body, {"layers", "hidden", "heads", "seq", "vocab", "mlp"});
    GptShape g;
    for (const char* k : {"layers", "hidden", "heads", "seq", "vocab"})
      if (!kv.count(k)) bad(spec, std::string("missing ") + k + "=");
    g.layers = number(spec, "layers", kv["layers"], kMaxCount);
    g.hidden = number(spec, "hidden", kv["hidden"]);
    g.heads = number(spec, "heads", kv["heads"]);
    g.seq = number(spec, "seq", kv["seq"]);
    g.vocab = number(spec, "vocab", kv["vocab"]);
    if (kv.count("mlp")) g.mlp_ratio = number(spec, "mlp", kv["mlp"]);
    m = describe_gpt(g);
  } else if (kind == "mlp") {
    std::vector<int64_t> sizes;
    for (const std::string& s : split(body, ',')) sizes.push_back(number(spec, "size", s));
    m = describe_mlp(sizes);
  } else if (kind == "dlrm") {
    auto kv = keyvals(spec, body, {"tables", "rows", "dim", "dense", "bottom", "top", "bag"});
    DlrmShape d;
    if (kv.count("tables")) d.tables = number(spec, "tables", kv["tables"], kMaxCount);
    if (kv.count("rows")) d.rows = number(spec, "rows", kv["rows"], kMaxRows);
    if (kv.count("dim")) d.dim = number(spec, "dim", kv["dim"]);
    if (kv.count("dense")) d.dense = number(spec, "dense", kv["dense"]);
    if (kv.count("bag")) d.bag = number(spec, "bag", kv["bag"]);
    if (kv.count("bottom")) d.bottom = sizes_of(spec, "bottom", kv["bottom"]);
    if (kv.count("top")) d.top = sizes_of(spec, "top", kv["top"]);
    m = describe_dlrm(d);
  } else {
    bad(spec, "unknown model kind '" + kind + "' (gpt, mlp, dlrm)");
  }
  m.spec = spec;
  return m;
}

ModelDesc load_model(const std::string& spec_or_path) {
  std::ifstream f(spec_or_path);
  if (!f) return parse_model(spec_or_path);
  std::string text, line;
  while (std::getline(f, line)) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    text += line.substr(a, line.find_last_not_of(" \t\r") + 1 - a);
  }
  try {
    return parse_model(text);
  } catch (const Error& e) {
    throw Error(e.code(), spec_or_path + ": " + e.what());
  }
}

}  // namespace braid::plan
