#!/usr/bin/python3
"""PyTorch twin of `braid train mlp|gpt`, for bench/compare_torch.sh.

Same models (parameter names match braid's), same initial weights when
--init-from names a braid checkpoint, same data order (braid's counter-based
sampler is reimplemented below), same optimizer semantics, same thread
count. Writes the same JSON-lines log as `braid train --json-log`.

Also the helpers scripts/gen_parity_fixture.py uses: the braid checkpoint
format (read and write) and the models.
"""
import argparse, ctypes, gzip, json, math, os, resource, struct, sys, time, zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1


# --- braid's counter-based RNG and sampler (include/braid/rng.h, data.h) ---
def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def counter_hash(a, b=0, c=0, d=0):
    h = mix64(a)
    h = mix64(h ^ b)
    h = mix64(h ^ c)
    return mix64(h ^ d)


def epoch_order(n, seed, epoch, shuffle=True):
    order = list(range(n))
    if not shuffle:
        return order
    stream = (0x5A3B1E00 + epoch) & M64
    pre = mix64(mix64(seed) ^ stream)
    ctr = 0
    for i in range(n - 1, 0, -1):
        h = mix64(mix64(pre ^ ctr) ^ 0)
        ctr += 1
        j = (h * (i + 1)) >> 64
        order[i], order[j] = order[j], order[i]
    return order


# --- braid checkpoint format (include/braid/checkpoint.h) ---
DT = {"f32": torch.float32, "i32": torch.int32}


def save_ckpt(path, tensors, meta=None):
    entries, off, blobs = [], 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        dt = "i32" if t.dtype in (torch.int32, torch.int64) else "f32"
        t = t.to(DT[dt])
        b = t.numpy().tobytes()
        entries.append({"name": name, "dtype": dt, "shape": list(t.shape), "offset": off, "nbytes": len(b)})
        pad = (-len(b)) % 64
        blobs.append(b + b"\0" * pad)
        off += len(b) + pad
    header = json.dumps({"version": 1, "meta": {k: str(v) for k, v in (meta or {}).items()},
                         "tensors": entries, "payload_bytes": off}).encode()
    body = b"BRAIDCK1" + struct.pack("<Q", len(header)) + header + b"".join(blobs)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body + struct.pack("<I", zlib.crc32(body)) + b"BRAIDEND")
    os.replace(tmp, path)


def load_ckpt(path):
    data = open(path, "rb").read()
    assert data[:8] == b"BRAIDCK1" and data[-8:] == b"BRAIDEND", path
    assert struct.unpack("<I", data[-12:-8])[0] == zlib.crc32(data[:-12]), "bad crc"
    (hlen,) = struct.unpack("<Q", data[8:16])
    h = json.loads(data[16:16 + hlen])
    base = 16 + hlen
    out = {}
    for e in h["tensors"]:
        raw = bytearray(data[base + e["offset"]: base + e["offset"] + e["nbytes"]])
        out[e["name"]] = torch.frombuffer(raw, dtype=DT[e["dtype"]]).reshape(e["shape"]).clone()
    return out, h["meta"]


# --- models (names match braid's) ---
def make_mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(("fc%d" % (i + 1), nn.Linear(sizes[i], sizes[i + 1])))
        if i + 2 < len(sizes):
            layers.append(("relu%d" % (i + 1), nn.ReLU()))
    from collections import OrderedDict
    return nn.Sequential(OrderedDict(layers))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(d, 3 * d)
        self.attn.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.fc = nn.Linear(d, 4 * d)
        self.mlp.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.attn.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        o = (F.softmax(s, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn.proj(o)
        return x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, d, heads):
        super().__init__()
        self.emb = nn.Module()
        self.emb.wte = nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.emb.wpe = nn.Parameter(torch.randn(context, d) * 0.02)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for n, p in self.named_parameters():
            if n.endswith(".bias"):
                nn.init.zeros_(p)
            elif ".ln" not in n and not n.startswith("ln_f") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.emb.wte[idx] + self.emb.wpe[:T]
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def load_into(model, tensors):
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(tensors["model/" + n].to(p.dtype))


# --- data ---
def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        return f.read()


def fashion(split, d="/usr/share/datasets/fashion-mnist"):
    pre = "train" if split == "train" else "t10k"
    im = read_idx(os.path.join(d, pre + "-images-idx3-ubyte.gz"))
    lb = read_idx(os.path.join(d, pre + "-labels-idx1-ubyte.gz"))
    n = struct.unpack(">I", im[4:8])[0]
    x = torch.frombuffer(bytearray(im[16:]), dtype=torch.uint8).reshape(n, 784)
    y = torch.frombuffer(bytearray(lb[8:]), dtype=torch.uint8).long()
    return x, y


def blas_core():
    """The OpenBLAS kernel set torch runs (as braid's done record names its
    own): the LD_LIBRARY_PATH the compare scripts set makes libblas.so.3,
    which torch loaded, OpenBLAS; dlopen returns that same library."""
    try:
        f = ctypes.CDLL("libblas.so.3").openblas_get_corename
        f.restype = ctypes.c_char_p
        return f().decode()
    except (OSError, AttributeError):
        return ""


def add_common_args(ap):
    """The flags braid train's twins share (bench/torch_train.py, bench/torch_ddp.py)."""
    ap.add_argument("model", choices=["mlp", "gpt"])
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--lr", type=float, default=-1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=-1)
    ap.add_argument("--json-log", default="")
    ap.add_argument("--init-from", default="")
    ap.add_argument("--data", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)


def standardise(x_u8):
    """Pixels as braid's Fashion-MNIST reader gives them."""
    return x_u8.float().div_(255.0).sub_(0.2860).div_(0.3530)


class Run:
    """Model, data and recipe from the flags, as `braid train` builds them."""

    def __init__(self, a):
        self.a = a
        self.mlp = a.model == "mlp"
        self.batch = a.batch or (256 if self.mlp else 16)
        self.lr = a.lr if a.lr >= 0 else (0.05 if self.mlp else 1e-3)
        if self.mlp:
            self.xtr, self.ytr = fashion("train")
            self.model = make_mlp([784, 512, 512, 10])
            self.n = self.xtr.shape[0]
            self.wd = max(a.weight_decay, 0.0)
        else:
            self.text = torch.frombuffer(bytearray(open(a.data, "rb").read()),
                                         dtype=torch.uint8).long()
            T = a.context
            self.model = GPT(256, T, a.layers, a.d_model, a.heads)
            self.n = self.text.numel() - T
            self.wd = a.weight_decay if a.weight_decay >= 0 else 0.01
            self.offs = torch.arange(T)
        if a.init_from:
            load_into(self.model, load_ckpt(a.init_from)[0])
        self.spe = self.n // self.batch
        self.units = 1 if self.mlp else a.context  # samples or tokens per sample
        self._orders = {}

    def prepare(self, steps):
        """Shuffles every epoch that `steps` steps reach, before any clock starts:
        the pure-Python shuffle takes ~0.1 s an epoch, which braid's C++ sampler
        does not spend, so it must not land inside the timed window."""
        for e in range((max(steps, 1) - 1) // self.spe + 1):
            self._epoch(e)

    def _epoch(self, e):
        if e not in self._orders:
            self._orders[e] = torch.tensor(epoch_order(self.n, self.a.seed, e))
        return self._orders[e]

    def optimizer(self, params):
        params = list(params)
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": self.wd},
                  {"params": no_decay, "weight_decay": 0.0}]
        if self.mlp:
            return torch.optim.SGD(groups, lr=self.lr, momentum=self.a.momentum)
        return torch.optim.AdamW(groups, lr=self.lr, betas=(0.9, 0.999), eps=1e-8)

    def batch_xy(self, s, lo=0, hi=None):
        """Step s's global batch in braid's sampler order, rows [lo, hi) of it."""
        idx = self._epoch(s // self.spe)[(s % self.spe) * self.batch:(s % self.spe + 1) * self.batch][lo:hi]
        if self.mlp:
            return standardise(self.xtr[idx]), self.ytr[idx]
        pos = idx[:, None] + self.offs[None, :]
        return self.text[pos], self.text[pos + 1]


class Clock:
    """Throughput over the steps after the first 20 (all of them when fewer), as braid."""

    def __init__(self):
        self.t0 = self.t_warm = time.time()
        self.warm = 0

    def step_done(self, s):
        if s + 1 == 20:
            self.t_warm, self.warm = time.time(), 20

    def finish(self, steps, units_per_step):
        """(units per second, seconds since start)."""
        t_end = time.time()
        measured, secs = steps - self.warm, t_end - self.t_warm
        if measured <= 0:
            measured, secs = steps, t_end - self.t0
        return measured * units_per_step / secs, t_end - self.t0


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward and loss under torch.autocast('cpu', bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    r = Run(a)
    model, batch, mlp = r.model, r.batch, r.mlp
    if mlp:
        xte, yte = fashion("test")
    opt = r.optimizer(model.parameters())
    steps = a.steps or (a.epochs or (2 if mlp else 0)) * r.spe or 200
    log = open(a.json_log, "w") if a.json_log else None
    r.prepare(steps)
    clock = Clock()
    loss_v = 0.0
    for s in range(steps):
        x, y = r.batch_xy(s)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        loss_v = loss.item()
        clock.step_done(s)
        if log:
            log.write(json.dumps({"step": s, "loss": loss_v, "lr": r.lr}) + "\n")
    rate, secs = clock.finish(steps, batch * r.units)
    done = {"event": "done", "model": a.model, "steps": steps, "final_loss": loss_v,
            "train_seconds": secs, "threads": a.threads, "precision": a.precision}
    done["samples_per_s" if mlp else "tokens_per_s"] = rate
    if mlp:
        correct = 0
        with torch.no_grad():  # in batches, as braid evaluates
            for i in range(0, xte.shape[0], batch):
                pred = model(standardise(xte[i:i + batch])).argmax(1)
                correct += (pred == yte[i:i + batch]).sum().item()
        done["test_accuracy"] = correct / xte.shape[0]
    done["blas_core"] = blas_core()
    done["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if log:
        log.write(json.dumps(done) + "\n")
    print(json.dumps(done))


if __name__ == "__main__":
    main()
