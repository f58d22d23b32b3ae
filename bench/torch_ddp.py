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
import argparse, json, os, resource, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train as tt  # noqa: E402  (models, data, sampler, checkpoints)


def worker(rank, world, a, init_file):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    torch.manual_seed(a.seed)
    r = tt.Run(a)
    ddp = torch.nn.parallel.DistributedDataParallel(r.model)
    opt = r.optimizer(ddp.parameters())
    steps = a.steps or 200
    lo, hi = rank * r.batch // world, (rank + 1) * r.batch // world
    r.prepare(steps)
    clock = tt.Clock()
    loss_v = 0.0
    first = []  # this rank's loss of the first steps, averaged over ranks after timing
    for s in range(steps):
        x, y = r.batch_xy(s, lo, hi)
        logits = ddp(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        loss_v = loss.item()  # this rank's share; the global loss is not needed for timing
        if s < 3:
            first.append(loss_v)
        clock.step_done(s)
    rate, secs = clock.finish(steps, r.batch * r.units)
    # The global batch's loss of the first steps, as braid logs it: the mean
    # of the ranks' means (their slices are equal when the batch divides).
    first_t = torch.tensor(first, dtype=torch.float64)
    dist.all_reduce(first_t)
    first = (first_t / world).tolist()
    done = {"event": "done", "model": a.model, "dp": world, "steps": steps, "final_loss": loss_v,
            "first_losses": first,
            "train_seconds": secs, "threads": a.threads, "blas_core": tt.blas_core(),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    done["samples_per_s" if r.mlp else "tokens_per_s"] = rate
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
    tt.add_common_args(ap)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
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
