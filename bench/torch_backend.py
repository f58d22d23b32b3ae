#!/usr/bin/python3
"""One rank's half of bench/torch_backend.sh: backend "braid" vs "gloo" from
the same PyTorch code, only the backend name differing.

  torch_backend.py ddp BACKEND       Fashion-MNIST MLP (784-512-512-10, SGD,
                                     global batch 256) under DDP with its
                                     defaults, batches sliced from the
                                     training set; prints {"samples_per_s": ...}
  torch_backend.py ddp_loader BACKEND  the same fed by a DataLoader over a
                                     DistributedSampler (shuffled each epoch),
                                     as a PyTorch user writes it
  torch_backend.py local BACKEND     the same loop without DDP: each rank
                                     trains its own copy, no gradient is
                                     exchanged (BACKEND only runs the
                                     barriers around the timing)
  torch_backend.py ddp_nocomm BACKEND  DDP with a comm hook that hands each
                                     bucket back unreduced: DDP's own work
                                     (hooks, bucket copies) without any
                                     communication, the ceiling of every
                                     backend's DDP
  torch_backend.py fsdp BACKEND      (torch 2.x) the GPT of torch_train.py
                                     (FSDP_GPT="layers,d_model,heads,seq",
                                     default 4,256,4,128; vocab 256) under
                                     FullyShardedDataParallel, FULL_SHARD,
                                     each block its own unit, AdamW, global
                                     batch 16 sequences; prints
                                     {"tokens_per_s": ...}
  torch_backend.py fsdp_local BACKEND  the same GPT and batch per rank
                                     without FSDP, each rank alone (the
                                     ceiling of any backend's FSDP)
  torch_backend.py allreduce BACKEND dist.all_reduce of float32, 8 B..64 MiB;
                                     prints {"bytes": n, "us": t} per size

Ranks come from the environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT); one
thread each. Time is taken inside the ranks after warm-up, rank 0 prints.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def batches(xtr, ytr, world, rank, batch, loader):
    """This rank's (x, y) per step, endlessly: contiguous slices of the
    training set, or (loader) what a PyTorch user writes: a DataLoader over
    a DistributedSampler that reshuffles every epoch."""
    n = xtr.shape[0]
    if not loader:
        s = 0
        while True:
            lo = (s * 256 + rank * batch) % (n - batch)
            yield xtr[lo:lo + batch], ytr[lo:lo + batch]
            s += 1
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(TensorDataset(xtr, ytr), num_replicas=world, rank=rank, seed=0)
    dl = DataLoader(TensorDataset(xtr, ytr), batch_size=batch, sampler=sampler, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from dl
        epoch += 1


def timed(loss_fn, opt, warmup, steps, set_to_none):
    """Trains warmup + steps steps (loss_fn() the forward's loss, then
    backward and opt); the seconds the last `steps` took (between
    barriers, so the slower rank's time) and the last loss."""
    def step():
        loss = loss_fn()
        opt.zero_grad(set_to_none=set_to_none)
        loss.backward()
        opt.step()
        return loss
    for _ in range(warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    dist.barrier()
    return time.perf_counter() - t0, loss


def nocomm_hook(state, bucket):
    """A bucket handed back as it is: DDP without communication."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def ddp(loader=False, wrap=True, nocomm=False, steps=int(os.environ.get("DDP_STEPS", "300")), warmup=20):
    import torch_train as tt  # Fashion-MNIST reader and MLP of compare_ddp.sh
    xtr, ytr = tt.fashion("train")
    torch.manual_seed(0)
    model = tt.make_mlp([784, 512, 512, 10])
    if wrap:
        model = torch.nn.parallel.DistributedDataParallel(model)
        if nocomm:
            model.register_comm_hook(None, nocomm_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    world, rank = dist.get_world_size(), dist.get_rank()
    batch = 256 // world
    data = batches(xtr, ytr, world, rank, batch, loader)

    def loss_fn():
        xb, y = next(data)
        return F.cross_entropy(model(tt.standardise(xb)), y)
    dt, loss = timed(loss_fn, opt, warmup, steps, set_to_none=False)
    if rank == 0:
        print(json.dumps({"samples_per_s": steps * 256 / dt, "loss": loss.item()}), flush=True)


def fsdp(wrap=True, steps=int(os.environ.get("FSDP_STEPS", "30")), warmup=5):
    import functools
    import torch_train as tt
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    layers, d, heads, seq = (int(v) for v in os.environ.get("FSDP_GPT", "4,256,4,128").split(","))
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = tt.GPT(256, seq, layers, d, heads)
    if wrap:
        model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                     auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                        transformer_layer_cls={tt.Block}),
                     device_id=torch.device("cpu"), use_orig_params=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = 16 // world
    g = torch.Generator().manual_seed(100 + rank)

    def loss_fn():
        idx = torch.randint(0, 256, (batch, seq + 1), generator=g)
        return F.cross_entropy(model(idx[:, :-1]).reshape(-1, 256), idx[:, 1:].reshape(-1))
    dt, loss = timed(loss_fn, opt, warmup, steps, set_to_none=True)
    if rank == 0:
        print(json.dumps({"tokens_per_s": steps * 16 * seq / dt, "loss": loss.item()}), flush=True)


def allreduce():
    for size in (8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
        t = torch.ones(max(1, size // 4))
        iters = max(5, min(2000, (256 << 20) // (size * 8)))
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        us = (time.perf_counter() - t0) / iters * 1e6
        dt = torch.tensor([us], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            print(json.dumps({"bytes": size, "us": dt.item()}), flush=True)


def main():
    mode, backend = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    if backend == "braid":
        import braid_torch  # noqa: F401
    dist.init_process_group(backend, init_method="env://")
    {"ddp": ddp, "ddp_loader": lambda: ddp(loader=True),
     "local": lambda: ddp(wrap=False), "ddp_nocomm": lambda: ddp(nocomm=True), "fsdp": fsdp, "fsdp_local": lambda: fsdp(wrap=False),
     "allreduce": allreduce}[mode]()
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # a gloo group can hang in its destructor (RIVALS.md)


if __name__ == "__main__":
    main()
