"""DistributedDataParallel's options and communication hooks on backend "braid"
give Gloo's losses.

The same MLP, data and optimizer at world 2, once per DDP configuration,
with backend "braid" and with "gloo"; 12 per-step losses each, within 1e-6
of Gloo's (two ranks' sums are the same in either order, so the only
difference allowed is none at all beyond rounding of the mean):

- static_graph=True (DDP's fixed bucket order after the first step);
- gradient_as_bucket_view=True (gradients are views into the buckets the
  backend reduces in place);
- no_sync(): gradient accumulation over two micro-batches, the first
  without a reduction;
- find_unused_parameters=True with a branch some steps leave unused;
- the comm hooks torch ships for any backend: allreduce_hook,
  fp16_compress_hook and bf16_compress_hook (the gradients travel as
  half/bfloat16 all_reduces and futures; torch 1.13 refuses the bf16 hook
  without CUDA whatever the backend, and the test then checks that it
  refuses gloo alike), and PowerSGD (rank-1, error
  feedback; all_reduces of its P and Q factors after a warm-up of plain
  ones, each issued from a future's callback that then waits for it; one
  bucket, see run()).
- sparse_embedding: an nn.EmbeddingBag(sparse=True) under DDP, whose
  gradient buckets are sparse COO tensors that DDP all-reduces as such.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.optim as optim  # noqa: E402

CONFIGS = ["static_graph", "bucket_view", "no_sync", "unused", "allreduce_hook", "fp16_hook", "bf16_hook",
           "powersgd", "sparse_embedding"]
if os.environ.get("DDP_CONFIGS"):  # a subset, by name (for a look at one)
    CONFIGS = os.environ["DDP_CONFIGS"].split(",")
STEPS = 12


class Branchy(nn.Module):
    """An MLP with a second head that only some steps use."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.head = nn.Linear(128, 10)
        self.aux = nn.Linear(128, 10)

    def forward(self, x, use_aux=False):
        h = self.body(x)
        return self.head(h) + (self.aux(h) if use_aux else 0)


class SparseBag(nn.Module):
    """Sums of embedding rows (sparse gradients) into a linear head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.EmbeddingBag(1000, 32, mode="sum", sparse=True)
        self.head = nn.Linear(32, 10)

    def forward(self, ids):
        return self.head(self.emb(ids))


def run_sparse():
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(SparseBag())
    opt = optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        ids = torch.randint(0, 1000, (32, 4), generator=g)
        loss = F.cross_entropy(model(ids), ids[:, 0] % 10)
        loss.backward()
        assert model.module.emb.weight.grad.is_sparse
        opt.step()
        losses.append(harness.mean_over_ranks(loss))
    return losses


def run(config):
    if config == "sparse_embedding":
        return run_sparse()
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    # Several buckets, but one for PowerSGD: its hook issues collectives
    # from future callbacks (on the completing thread) while backward issues
    # later buckets' on the autograd thread, so with several buckets the
    # ranks' order of collectives is a race -- gloo's too (on torch 2.15 it
    # fails there as braid does: a mismatch).
    kw = {"bucket_cap_mb": 100 if config == "powersgd" else 0.05}
    if config == "static_graph":
        kw["static_graph"] = True
    elif config == "bucket_view":
        kw["gradient_as_bucket_view"] = True
    elif config == "unused":
        kw["find_unused_parameters"] = True
    net = Branchy()
    if config != "unused":
        net.aux = None  # every parameter takes part in every step
    model = DDP(net, **kw)
    if config == "allreduce_hook":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    elif config == "fp16_hook":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif config == "bf16_hook":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif config == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                       start_powerSGD_iter=3, use_error_feedback=True, random_seed=7)
        model.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(5))  # labels to learn
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        use_aux = config == "unused" and step % 3 == 0
        if config == "no_sync":
            x = torch.randn(2, 16, 64, generator=g)
            y = (x @ teacher).argmax(-1)
            with model.no_sync():
                F.cross_entropy(model(x[0]), y[0]).backward()
            loss = F.cross_entropy(model(x[1]), y[1])
        else:
            x = torch.randn(32, 64, generator=g)
            y = (x @ teacher).argmax(-1)
            loss = F.cross_entropy(model(x, use_aux) if config == "unused" else model(x), y)
        loss.backward()
        opt.step()
        losses.append(harness.mean_over_ranks(loss))
    return losses


def worker():
    backend = harness.worker_args()[0]
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="env://")
    for c in CONFIGS:
        try:
            harness.report(c, run(c))
        except TypeError as e:
            # torch 1.13 refuses bf16_compress_hook without CUDA and NCCL,
            # whatever the backend (DDP._check_comm_hook).
            if c != "bf16_hook" or "CUDA" not in str(e):
                raise
            harness.report(c, "refused by torch: " + str(e))
    harness.finish()


def main():
    got = {b: harness.spawn(__file__, 2, [b]) for b in ("braid", "gloo")}
    # braid again with its collectives on its background thread (by default
    # here they run on the issuing thread: python/braid_torch/threads.h).
    got["braid_thread"] = harness.spawn(__file__, 2, ["braid"], env={"BRAID_TORCH_INLINE": "0"})
    for b in ("braid", "braid_thread"):
        for c in CONFIGS:
            braid, gloo = got[b][0][1][c], got["gloo"][0][1][c]
            name = "%s (%s)" % (c, b)
            if isinstance(gloo, str):  # refused by torch for every backend
                assert braid == gloo, (name, braid, gloo)
                print("%-28s %s (gloo too)" % (name, braid))
                continue
            assert len(braid) == STEPS and len(gloo) == STEPS, (name, braid, gloo)
            for i, (x, y) in enumerate(zip(braid, gloo)):
                assert abs(x - y) <= 1e-6 * max(1.0, abs(y)), "%s step %d: braid %r, gloo %r" % (name, i, x, y)
            assert braid[-1] < braid[0], "%s did not learn: %s" % (name, braid)
            print("%-28s %d per-step losses within 1e-6 of gloo's (first %.6f last %.6f)" % (
                name, STEPS, braid[0], braid[-1]))


if __name__ == "__main__":
    import braid_torch  # noqa: F401
    if harness.is_worker():
        worker()
    else:
        main()
