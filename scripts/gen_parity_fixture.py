#!/usr/bin/python3
"""Writes tests/fixtures/parity.ckpt: inputs, weights, loss and every
gradient of a small MLP and a small GPT, computed by PyTorch (Debian's
python3-torch) in float64 from float32 weights, in braid's checkpoint
format. tests/nn/parity_test.cc checks braid against it (no torch needed
to run the tests). Usage: /usr/bin/python3 scripts/gen_parity_fixture.py
"""
import os, sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "bench"))
import torch_train as tt  # noqa: E402

MLP = dict(sizes=[12, 16, 16, 5], batch=6)
GPT = dict(vocab=32, context=8, layers=2, dim=16, heads=2, batch=3)


def main():
    torch.manual_seed(1234)
    out, meta = {}, {}

    m = tt.make_mlp(MLP["sizes"])
    for p in m.parameters():  # round to f32 first so both sides start equal
        p.data = p.data.float()
    x = torch.randn(MLP["batch"], MLP["sizes"][0])
    y = torch.randint(0, MLP["sizes"][-1], (MLP["batch"],), dtype=torch.int32)
    for n, p in m.named_parameters():
        out["mlp/model/" + n] = p.data.clone()
    m = m.double()
    loss = F.cross_entropy(m(x.double()), y.long())
    loss.backward()
    for n, p in m.named_parameters():
        out["mlp/grad/" + n] = p.grad.float()
    out["mlp/x"], out["mlp/y"] = x, y
    meta["mlp/loss"] = repr(loss.item())
    meta["mlp/sizes"] = ",".join(map(str, MLP["sizes"]))

    g = tt.GPT(GPT["vocab"], GPT["context"], GPT["layers"], GPT["dim"], GPT["heads"])
    with torch.no_grad():  # non-trivial LayerNorm/bias values exercise every gradient
        for n, p in g.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.mul_(5.0)
    for n, p in g.named_parameters():
        out["gpt/model/" + n] = p.data.clone()
    tok = torch.randint(0, GPT["vocab"], (GPT["batch"], GPT["context"] + 1), dtype=torch.int32)
    g = g.double()
    logits = g(tok[:, :-1].long())
    loss = F.cross_entropy(logits.reshape(-1, GPT["vocab"]), tok[:, 1:].reshape(-1).long())
    loss.backward()
    for n, p in g.named_parameters():
        out["gpt/grad/" + n] = p.grad.float()
    out["gpt/x"], out["gpt/y"] = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    meta["gpt/loss"] = repr(loss.item())
    for k in ("vocab", "context", "layers", "dim", "heads"):
        meta["gpt/" + k] = GPT[k]

    path = os.path.join(here, "..", "tests", "fixtures", "parity.ckpt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tt.save_ckpt(path, out, meta)
    print("wrote", os.path.normpath(path), os.path.getsize(path), "bytes; mlp loss",
          meta["mlp/loss"], "gpt loss", meta["gpt/loss"])


if __name__ == "__main__":
    main()
