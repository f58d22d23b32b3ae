// A GPT's virtual stages and any other model's one stage, term by term
// (stages.h).
#include "plan/cost/stages.h"

#include <algorithm>

namespace braid::plan {
namespace {

// What a GPT stage keeps for backward, in elements of eb bytes per token:
// per block (nothing recomputed, selective, full) and at its ends, as the
// runtime counts it. kMegatron: gpt_block_activations (tp shards the
// sharded tensors and the scores; sequence parallelism the replicated ones
// too), the embedding's output, and the head's input with f32
// probabilities. kBraidCpu: what braid's layers hold
// (gpt_braid_activations).
BraidActivations activations_per_token(const GptShape& g, int tp, bool sp, int pp, Runtime rt,
                                       double eb) {
  if (rt == Runtime::kBraidCpu) return gpt_braid_activations(g, tp, sp, tp > 1 || pp > 1);
  const BlockActivations ba = gpt_block_activations(g);
  const double shard_full = sp ? tp : 1, h = double(g.hidden);
  BraidActivations a;
  a.selective = ba.replicated / shard_full + ba.sharded / tp;
  a.block = a.selective + ba.scores / tp;
  a.input = ba.input / shard_full;
  a.first = h / shard_full;
  a.last = h + double(g.vocab) * 4 / eb / tp;
  return a;
}

// Seconds of a GEMM-bound pass of `flops`, at the efficiency of a GEMM of
// `gemm` FLOPs.
double gemm_time(const Device& dev, double flops, double gemm) {
  return flops / (dev.peak(dev.dtype) * dev.efficiency(gemm));
}

}  // namespace

// A GPT's S = pp × chunks virtual stages, each with one micro-batch of
// l.mbs sequences: blocks as the runtime cuts them (stage 0 carries the
// embedding, the last the head), their tp collectives on `tpg`, what
// recomputation re-runs and what each keeps. `share`: compute stretched by
// time-shared cores. blocks_on[r]: the blocks on pipeline rank r.
std::vector<Stage> gpt_stages(const ModelDesc& m, const Device& dev, const Layout& l, double share, Group& tpg,
                              std::vector<double>& blocks_on) {
  const int tp = l.tp, pp = l.pp, S = pp * l.virtual_stages;
  const bool sp = l.sequence_parallel;
  const double eb = dev.element_bytes(), mbs = l.mbs;
  std::vector<Stage> st(static_cast<size_t>(S));
  blocks_on.assign(static_cast<size_t>(pp), 0.0);
  const GptShape& g = m.gpt;
  const double h = double(g.hidden), s = double(g.seq), V = double(g.vocab), r = double(g.mlp_ratio);
  const double tokens = mbs * s, Na = tokens * h * eb;  // one activation tensor, full
  const double shard_full = sp ? tp : 1;  // tensors replicated over tp, unless sp shards them
  const std::vector<int64_t> stage_blocks = gpt_stage_blocks(g, S, dev.runtime);
  std::vector<const LayerDesc*> blocks;
  for (const LayerDesc& d : m.layers)
    if (d.block) blocks.push_back(&d);
  size_t next = 0;
  // Per block, per micro-batch.
  const double block_flops = 2 * blocks[0]->macs * mbs / tp;
  const double attn_flops = 2 * 2 * mbs * s * s * h / tp;  // QKᵀ and AV
  const double block_gemm = 2 * tokens * h * r * h / tp;
  // Element-wise passes of braid's block, per token, in elements moved:
  // two layer norms (read, write: 4h) and two residual adds (6h), the
  // attention's bias and head reshapes (2h), GELU (2·R·h), softmax over
  // the scores (read, write, and the causal mask: 3·A·S). Memory-bound:
  // bytes ÷ the rate of their kind of pass (Device::pass_rate: measured
  // on this-machine, else the memory bandwidth); backward moves twice as
  // much.
  const double softmax_s =
      eb * tokens * 3 * double(g.heads) * s / tp / dev.pass_rate(&Device::PassRates::softmax);
  const double elem_s = eb * tokens *
                            (10 * h / shard_full / dev.pass_rate(&Device::PassRates::norm) +
                             2 * h / shard_full / dev.memory_bw +
                             2 * r * h / tp / dev.pass_rate(&Device::PassRates::gelu)) +
                        softmax_s;
  const double t_block = gemm_time(dev, block_flops, block_gemm) + elem_s;
  const double t_attn = gemm_time(dev, attn_flops, attn_flops) + softmax_s;
  Priced ag, rs, ar;  // the activation's collectives, those the mode uses
  if (sp) {
    ag = tpg("all_gather", Na);
    rs = tpg("reduce_scatter", Na);
  } else {
    ar = tpg("all_reduce", Na);
  }
  const Priced two_fwd = sp ? Priced{2 * (ag.s + rs.s), 2 * (ag.bytes + rs.bytes)} : Priced{2 * ar.s, 2 * ar.bytes};
  const BraidActivations act = activations_per_token(g, tp, sp, pp, dev.runtime, eb);
  const double act_sel = eb * tokens * act.selective, act_none = eb * tokens * act.block;
  const double act_input = eb * tokens * act.input;
  for (int v = 0; v < S; ++v) {
    Stage& x = st[size_t(v)];
    const int64_t nb = stage_blocks[size_t(v)];
    blocks_on[size_t(v % pp)] += double(nb);
    double comp = 0;
    for (int64_t i = 0; i < nb; ++i) x.params += blocks[next++]->params / tp;
    comp += nb * t_block;
    x.tp_fwd += nb * two_fwd.s;
    x.tp_bwd += nb * two_fwd.s;
    x.tp_bytes += 2 * nb * two_fwd.bytes;
    double recompute = 0;
    if (l.recompute == Recompute::kSelective) {
      recompute = nb * t_attn;
      x.re_flops += nb * attn_flops;
      x.act += nb * act_sel;
    } else if (l.recompute == Recompute::kFull) {
      recompute = nb * t_block;
      x.tp_bwd += nb * two_fwd.s;
      x.tp_bytes += nb * two_fwd.bytes;
      x.re_flops += nb * block_flops;
      x.act += nb * act_input;
      x.work = nb > 0 ? act_none : 0;
    } else {
      x.act += nb * act_none;
    }
    double elementwise = 0;
    if (v == 0) {  // embedding: a gather, then a tp all_reduce (sp: reduce_scatter)
      x.params += m.layers.front().params / tp;
      elementwise += 3 * Na / dev.memory_bw;
      const Priced p = sp ? rs : ar;
      x.tp_fwd += p.s;
      x.tp_bytes += p.bytes;
      x.act += eb * tokens * act.first;
    }
    if (v == S - 1) {  // ln_f, the vocab-parallel head and its loss
      x.params += (m.layers[m.layers.size() - 2].params + m.layers.back().params) / tp;
      elementwise += 3 * Na / dev.memory_bw;
      const double head_flops = 2 * tokens * h * V / tp;
      comp += gemm_time(dev, head_flops, head_flops);
      const Priced loss = tpg("all_reduce", 3 * tokens * 4);  // max, Σexp, target logit
      x.tp_fwd += loss.s + (sp ? ag.s : 0);
      x.tp_bwd += sp ? rs.s : ar.s;
      x.tp_bytes += loss.bytes + (sp ? ag.bytes + rs.bytes : ar.bytes);
      // lean: its input, and f32 probabilities.
      x.act += eb * tokens * act.last;
    }
    x.fwd_own = comp + elementwise + x.tp_fwd;
    x.bwd_own = 2 * comp + elementwise + recompute + x.tp_bwd;
    x.fwd = share * (comp + elementwise) + x.tp_fwd;
    x.bwd = share * (2 * comp + elementwise + recompute) + x.tp_bwd;
  }
  return st;
}

// Any other model as one stage (layouts of tp = pp = 1): its layers'
// GEMMs and stored activations for a micro-batch of l.mbs samples.
Stage layer_stage(const ModelDesc& m, const Device& dev, const Layout& l, double share) {
  Stage x;
  double comp = 0;
  for (const LayerDesc& d : m.layers) {
    x.params += d.params;
    const double f = 2 * d.macs * l.mbs;
    if (f > 0) comp += gemm_time(dev, f, f);
    x.act += d.act_elems * l.mbs * dev.element_bytes();
  }
  x.fwd_own = comp;
  x.bwd_own = 2 * comp;
  x.fwd = share * comp;
  x.bwd = share * 2 * comp;
  return x;
}

}  // namespace braid::plan
