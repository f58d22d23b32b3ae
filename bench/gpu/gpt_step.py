#!/usr/bin/env python3
"""One GPU's GPT training step, to hold the planner's one-device terms to.

`braid plan --cluster dgx-h100 --gpus 1` prices a step as GEMM FLOPs at the
device's measured GEMM curve, element-wise passes at its memory bandwidth,
and the optimizer; its memory as bf16 weights and gradients, fp32 master
weights and Adam moments (16 bytes a parameter) and Megatron's activation
count (34·s·b·h + 5·a·s²·b bytes a layer, without recomputation). This
script trains that model as written: a GPT with untied head, learned
positions, pre-norm blocks, no dropout (--dropout P adds it), attention materialised
(QKᵀ, causal mask, softmax, dropout, ×V: no flash kernel), bf16 weights,
activations and gradients, fp32 master weights with AdamW applied one
parameter at a time. Recompute `full` checkpoints each block, `selective`
the attention core only (as Korthikanti et al. 2022).

Per configuration: 2 warm-up steps, then 5 timed steps (CUDA-synchronised
wall clock); the median step, its forward+backward part, and the peak of
torch.cuda.max_memory_allocated over the timed steps. One JSON object per
line. Needs a GPU and PyTorch; make test and make bench never run it.

  python3 bench/gpu/gpt_step.py OUT.jsonl [--fused] [--dropout P]
"""
import json, math, statistics, sys, time
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

P_DROP = 0.0  # --dropout P sets it; the planner's presets assume none
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run only


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class Block(torch.nn.Module):
    def __init__(self, h, heads, recompute):
        super().__init__()
        self.h, self.heads, self.recompute = h, heads, recompute
        self.ln1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.proj = torch.nn.Linear(h, h)
        self.ln2 = torch.nn.LayerNorm(h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)

    def core(self, q, k, v, mask):
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = scores.masked_fill(mask, float("-inf"))
        p = F.dropout(torch.softmax(scores, dim=-1), P_DROP, True)
        return p @ v

    def inner(self, x, mask):
        b, s, h = x.shape
        d = h // self.heads
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.recompute == "selective":
            a = checkpoint(self.core, q, k, v, mask, use_reentrant=False)
        else:
            a = self.core(q, k, v, mask)
        a = a.transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(a), P_DROP, True)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), P_DROP, True)

    def forward(self, x, mask):
        if FUSED:
            w = tuple(t for m in (self.ln1, self.qkv, self.proj, self.ln2, self.fc1, self.fc2)
                      for t in (m.weight, m.bias))
            if self.recompute == "full":
                return checkpoint(fused_block, x, mask, self.heads, *w, use_reentrant=False)
            return fused_block(x, mask, self.heads, *w)
        if self.recompute == "full":
            return checkpoint(self.inner, x, mask, use_reentrant=False)
        return self.inner(x, mask)


def block_fn(x, mask, heads, l1w, l1b, qw, qb, pw, pb, l2w, l2b, f1w, f1b, f2w, f2b):
    b, s, h = x.shape
    d = h // heads
    y = F.layer_norm(x, (h,), l1w, l1b)
    qkv = F.linear(y, qw, qb).view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)
    scores = (qkv[0] @ qkv[1].transpose(-1, -2)) * (1.0 / math.sqrt(d))
    p = F.dropout(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1), P_DROP, True)
    a = (p @ qkv[2]).transpose(1, 2).reshape(b, s, h)
    x = x + F.dropout(F.linear(a, pw, pb), P_DROP, True)
    y = F.gelu(F.linear(F.layer_norm(x, (h,), l2w, l2b), f1w, f1b))
    return x + F.dropout(F.linear(y, f2w, f2b), P_DROP, True)


FUSED = False
fused_block = None


class Gpt(torch.nn.Module):
    def __init__(self, layers, h, heads, seq, vocab, recompute):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, h)
        self.wpe = torch.nn.Embedding(seq, h)
        self.blocks = torch.nn.ModuleList(Block(h, heads, recompute) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, idx, targets):
        s = idx.shape[1]
        x = F.dropout(self.wte(idx) + self.wpe.weight[:s], P_DROP, True)
        for blk in self.blocks:
            x = blk(x, self.mask[:s, :s])
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


class MasterAdamW:
    """fp32 master weights and moments; one parameter at a time, so the
    fp32 gradient copy is never held for all parameters at once."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, wd=0.1):
        self.params = list(params)
        self.master = [p.detach().float().clone() for p in self.params]
        self.m = [torch.zeros_like(w) for w in self.master]
        self.v = [torch.zeros_like(w) for w in self.master]
        self.lr, self.b1, self.b2, self.eps, self.wd, self.t = lr, betas[0], betas[1], eps, wd, 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, w, m, v in zip(self.params, self.master, self.m, self.v):
            g = p.grad.float()
            w.mul_(1 - self.lr * self.wd)
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            w.addcdiv_(m, v.div(c2).sqrt_().add_(self.eps), value=-self.lr / c1)
            p.copy_(w)
            p.grad = None


def run(cfg):
    torch.manual_seed(0)
    L, h, A, s, V = cfg["layers"], cfg["hidden"], cfg["heads"], cfg["seq"], cfg["vocab"]
    batch, mbs = cfg["batch"], cfg["mbs"]
    model = Gpt(L, h, A, s, V, cfg["recompute"]).to(DEV).to(torch.bfloat16)
    opt = MasterAdamW(model.parameters())
    params = sum(p.numel() for p in model.parameters())
    data = torch.randint(0, V, (batch, s + 1), device=DEV)
    steps, fb = [], []
    sync()
    for it in range(7):
        if it == 2 and DEV == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for i in range(0, batch, mbs):
            chunk = data[i:i + mbs]
            loss = model(chunk[:, :-1], chunk[:, 1:]) * (mbs / batch)
            loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        sync()
        t2 = time.perf_counter()
        if it >= 2:
            steps.append(t2 - t0)
            fb.append(t1 - t0)
    out = dict(cfg)
    out.update(params=params, step_s=statistics.median(steps), fwd_bwd_s=statistics.median(fb),
               steps_s=steps, loss=float(loss.detach()) * batch / mbs)
    if DEV == "cuda":
        out.update(peak_allocated=torch.cuda.max_memory_allocated(),
                   peak_reserved=torch.cuda.max_memory_reserved())
    del model, opt, data
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return out


CONFIGS = [
    # name, layers, hidden, heads, seq, vocab, batch, mbs, recompute
    ("1.4b", 24, 2048, 16, 2048, 51200, 16, 4, "none"),
    ("1.4b", 24, 2048, 16, 2048, 51200, 16, 4, "selective"),
    ("1.4b", 24, 2048, 16, 2048, 51200, 16, 4, "full"),
    ("1.4b", 24, 2048, 16, 2048, 51200, 16, 2, "none"),
    ("350m", 24, 1024, 16, 1024, 51200, 32, 8, "none"),
    ("2.8b", 24, 3072, 24, 2048, 51200, 8, 2, "full"),
    ("2.8b", 24, 3072, 24, 2048, 51200, 8, 1, "selective"),
]

FUSED_CONFIGS = [CONFIGS[0], CONFIGS[2], CONFIGS[4]]

if __name__ == "__main__":
    # --fused: each block one torch.compile'd function (Inductor fuses its
    # element-wise passes: scale, mask, softmax and dropout; bias, GELU;
    # residual adds and layer norms), as Megatron's fused kernels do.
    if "--dropout" in sys.argv:
        i = sys.argv.index("--dropout")
        P_DROP = float(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    if "--fused" in sys.argv:
        sys.argv.remove("--fused")
        FUSED = True
        fused_block = torch.compile(block_fn, dynamic=False)
        CONFIGS = FUSED_CONFIGS
    keys = ("name", "layers", "hidden", "heads", "seq", "vocab", "batch", "mbs", "recompute")
    with open(sys.argv[1], "w") as f:
        name = torch.cuda.get_device_name() if DEV == "cuda" else "cpu"
        f.write(json.dumps({"device": name, "torch": torch.__version__}) + "\n")
        configs = CONFIGS if DEV == "cuda" else [("smoke", 2, 64, 4, 32, 128, 4, 2, r)
                                                 for r in ("none", "selective", "full")]
        for c in configs:
            cfg = dict(zip(keys, c), fused=FUSED, dropout=P_DROP)
            try:
                r = run(cfg)
            except torch.cuda.OutOfMemoryError:
                r = dict(cfg, error="out of memory")
                torch.cuda.empty_cache()
            print(json.dumps(r), flush=True)
            f.write(json.dumps(r) + "\n")
