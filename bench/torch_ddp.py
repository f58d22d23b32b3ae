#!/usr/bin/python3
"""PyTorch DistributedDataParallel twin of `braid train mlp|gpt --dp N`,
for bench/compare_ddp.sh.

Forks N ranks itself (gloo, a file:// rendezvous), so no torchrun (its
agent polls every 5 s and crashes on Python 3.11 here). Same models, initial
weights (--init-from a braid checkpoint), data order (braid's sampler, from
bench/torch_train.py), global batch split into contiguous per-rank slices,
optimizer and threads per rank as braid. DDP's defaults: 25 MiB buckets,
first bucket 1 MiB, all-reduce overlapping backward. Time is taken inside
the workers after 20 warm-up steps; rank 0 prints one JSON line like
braid's done record.
"""
import argparse, json, os, resource, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train as tt  # noqa: E402  (models, data, sampler, checkpoints)


def worker(rank, world, a, init_file):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    torch.manual_seed(a.seed)
    mlp = a.model == "mlp"
    batch = a.batch or (256 if mlp else 16)
    lr = a.lr if a.lr >= 0 else (0.05 if mlp else 1e-3)
    if mlp:
        xtr, ytr = tt.fashion("train")
        model = tt.make_mlp([784, 512, 512, 10])
        n = xtr.shape[0]
        wd = max(a.weight_decay, 0.0)
    else:
        text = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8).long()
        T = a.context
        model = tt.GPT(256, T, a.layers, a.d_model, a.heads)
        n = text.numel() - T
        wd = a.weight_decay if a.weight_decay >= 0 else 0.01
        offs = torch.arange(T)
    if a.init_from:
        tt.load_into(model, tt.load_ckpt(a.init_from)[0])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for p in ddp.parameters() if p.dim() >= 2]
    no_decay = [p for p in ddp.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    if mlp:
        opt = torch.optim.SGD(groups, lr=lr, momentum=a.momentum)
    else:
        opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    spe = n // batch
    steps = a.steps or 200
    lo, hi = rank * batch // world, (rank + 1) * batch // world
    order_epoch, order = -1, None
    loss_v = 0.0
    t0 = time.time()
    t_warm, warm = t0, 0
    for s in range(steps):
        e = s // spe
        if e != order_epoch:
            order, order_epoch = torch.tensor(tt.epoch_order(n, a.seed, e)), e
        idx = order[(s % spe) * batch:(s % spe + 1) * batch][lo:hi]
        if mlp:
            x = xtr[idx].float().div_(255.0)
            y = ytr[idx]
        else:
            pos = idx[:, None] + offs[None, :]
            x, y = text[pos], text[pos + 1]
        logits = ddp(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        loss_v = loss.item()  # this rank's share; the global loss is not needed for timing
        if s + 1 == 20:
            t_warm, warm = time.time(), 20
    t_end = time.time()
    measured, secs = steps - warm, t_end - t_warm
    if measured <= 0:
        measured, secs = steps, t_end - t0
    per = 1 if mlp else a.context
    done = {"event": "done", "model": a.model, "dp": world, "steps": steps, "final_loss": loss_v,
            "train_seconds": t_end - t0, "threads": a.threads,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    done["samples_per_s" if mlp else "tokens_per_s"] = measured * batch * per / secs
    dist.barrier()
    if rank == 0:
        print(json.dumps(done))
        if a.json_log:
            with open(a.json_log, "w") as f:
                f.write(json.dumps(done) + "\n")
    sys.stdout.flush()
    dist.barrier()
    os._exit(0)  # a world-2 gloo job can hang in the process-group destructor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["mlp", "gpt"])
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
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
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    fd, init_file = tempfile.mkstemp(prefix="torch_ddp_")
    os.close(fd)
    os.unlink(init_file)
    pids = []
    for r in range(a.dp):
        pid = os.fork()
        if pid == 0:
            try:
                worker(r, a.dp, a, init_file)
            except BaseException as e:  # noqa: BLE001
                print("rank %d: %r" % (r, e), file=sys.stderr)
                sys.stderr.flush()
                os._exit(1)
        pids.append(pid)
    status = 0
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        status = status or (os.waitstatus_to_exitcode(st) != 0)
    try:
        os.unlink(init_file)
    except OSError:
        pass
    sys.exit(1 if status else 0)


if __name__ == "__main__":
    main()
