#!/usr/bin/env python3
"""TorchRec's twin of `braid train dlrm --dp N --embeddings sharded`, for
bench/dlrm_hybrid.sh (issue 36): the same DLRM, data, batches and table
sharding, trained by TorchRec's DistributedModelParallel on CPU over gloo.

    torchrec_dlrm.py --data CLICK --init INIT --shard table|row|column|auto
                     [--plan KIND,...] [--world 2] [--batch 2048] [--steps 100]
                     [--dim 32] [--lr 0.1] [--seed 1] [--kernel fused|dense]
                     [--pipeline none|sparse-dist] [--json-log FILE]

Needs a Python with torch, torchrec and fbgemm-gpu-cpu
(scripts/torchrec_venv.sh makes one). It starts --world ranks itself
(torch.multiprocessing, gloo on 127.0.0.1), each with one compute thread
(torch.set_num_threads(1), as braid's --threads 1).

What is the same as braid's run:
  data    CLICK is `braid data click --out CLICK` with train dlrm's data
          flags: every train and test sample braid draws. Step s trains on
          global batch s of braid's sampler (epoch_order of
          bench/torch_train.py, braid's shuffle reimplemented; seed --seed),
          rank r on its contiguous slice [r*B/w, (r+1)*B/w), as braid.
  model   torchrec.models.dlrm.DLRM: bottom MLP dense -> 32 -> dim (ReLU after
          each), one EmbeddingBag per feature (sum pooling) in an
          EmbeddingBagCollection fed a KeyedJaggedTensor, the pairwise dot
          interaction, top MLP -> 64 -> 32 -> 1; binary cross-entropy with
          logits, the mean over the batch.
  weights INIT is the initial weights braid starts from (`braid train dlrm
          ... --save-init INIT`, the same for every sharding). TorchRec's
          interaction lists the pairs (i < j) row by row where braid lists
          (i > j); the top MLP's first weight gets its columns permuted to
          match, so the function is the same and so are the first losses.
  sharding --shard table|row|column: every table so, as braid's planner
          (include/braid/embedding_plan.h): table-wise tables go, largest
          first, onto the rank holding the fewest bytes (ties: the lowest);
          row-wise splits rows into contiguous blocks, column-wise the width
          into equal blocks, one per rank. --shard auto takes the kinds braid
          chose (--plan, the "plan" of braid's done record) and places the
          table-wise ones by the same rule. Bottom and top MLPs are data
          parallel (DistributedModelParallel wraps them in
          DistributedDataParallel).
  update  SGD at --lr, momentum 0, no weight decay, for the MLPs and the
          tables alike (braid's row-wise SGD touches the rows a batch
          names; TorchRec's exact SGD does the same).
  clock   samples/s = B * (steps - warm) / seconds from the end of step
          `warm` to the end of the last step, warm = min(20, steps // 5),
          on rank 0: braid's rule. Setup, data loading from the file, the
          weight copy and the test pass are outside it; each step's batch
          assembly (slicing the rows, building the KeyedJaggedTensor) is
          inside, as braid's gather is inside its step.
  test    the mean log loss over the whole test split, each rank a
          contiguous half in batches of at most 1000, as braid's evaluate.

--kernel fused (default): TorchRec's FBGEMM table-batched embedding kernel
with the table optimizer fused into backward (apply_optimizer_in_backward),
what TorchRec recommends for training; --kernel dense: one torch
EmbeddingBag per shard and a plain optimizer step (4-5x slower here).
--pipeline none (default): forward, backward and the MLPs' optimizer step
one batch after another; --pipeline sparse-dist: TorchRec's
TrainPipelineSparseDist, which starts the next batch's id exchange before
this batch's step. Every combination trains the same numbers.

Output: one JSON line per step ({"step", "loss"}: the global batch's mean
loss) to --json-log, and a done record ({"event": "done", "samples_per_s",
"test_log_loss", "first_losses", ...}) to it and to stdout.
"""
import argparse
import json
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import epoch_order, load_ckpt  # noqa: E402  braid's sampler and checkpoints


def args_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="braid data click --out FILE")
    ap.add_argument("--init", required=True, help="braid train dlrm --save-init FILE")
    ap.add_argument("--shard", default="auto", choices=["table", "row", "column", "auto"])
    ap.add_argument("--plan", default="", help="with --shard auto: braid's kinds, comma-separated")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=2048, help="global batch")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--bottom", default="32", help="bottom MLP hidden sizes (braid's: 32)")
    ap.add_argument("--top", default="64,32", help="top MLP hidden sizes (braid's: 64,32)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1, help="braid's --seed: the data order")
    ap.add_argument("--kernel", default="fused", choices=["fused", "dense"])
    ap.add_argument("--pipeline", default="none", choices=["none", "sparse-dist"],
                    help="sparse-dist: TrainPipelineSparseDist (the next batch's input "
                         "exchange overlaps this one's step)")
    ap.add_argument("--eval-batch", type=int, default=1000)
    ap.add_argument("--json-log", default="")
    return ap


# --- the sharding braid's planner picks (include/braid/embedding_plan.h) ---
def plan_tables(rows, dim, world, shard, kinds):
    """[(kind, rank or None)] per table: kind "table", "row" or "column"."""
    n = len(rows)
    if shard == "auto":
        kinds = [k.replace("-wise", "") for k in kinds.split(",")] if kinds else []
        if len(kinds) != n or any(k not in ("table", "row", "column") for k in kinds):
            raise SystemExit("--shard auto needs --plan with one of table-wise, row-wise, "
                             "column-wise per table (%d tables), got %r" % (n, kinds))
    else:
        kinds = [shard] * n
    if "column" in kinds and dim % world:
        raise SystemExit("column-wise needs --dim %d to divide by --world %d" % (dim, world))
    load, out = [0] * world, [None] * n
    for f in sorted(range(n), key=lambda f: -rows[f]):  # stable: ties keep feature order
        if kinds[f] == "table":
            r = min(range(world), key=lambda q: load[q])
            load[r] += rows[f] * dim * 4
            out[f] = ("table", r)
        else:
            out[f] = (kinds[f], None)
    return out


# --- braid's initial weights into TorchRec's DLRM ---
def pair_permutation(nvec):
    """For each of TorchRec's interaction columns (pairs i < j, row by row),
    the index of the same pair in braid's order (pairs i > j, row by row)."""
    braid = {}
    for i in range(1, nvec):
        for j in range(i):
            braid[(j, i)] = len(braid)
    return [braid[(i, j)] for i in range(nvec) for j in range(i + 1, nvec)]


def braid_linears(tensors, part):
    """braid's Linear weights and biases of one MLP ("bot" or "top"), in order."""
    out, i = [], 1
    while True:
        w = [k for k in tensors if k.endswith("%s.fc%d.weight" % (part, i))]
        if not w:
            return out
        out.append((tensors[w[0]], tensors[w[0][: -len("weight")] + "bias"]))
        i += 1


def load_dense(model, tensors, features, dim):
    bottom, top = braid_linears(tensors, "bot"), braid_linears(tensors, "top")
    ours_bottom = [m for m in model.dense_arch.modules() if isinstance(m, torch.nn.Linear)]
    ours_top = [m for m in model.over_arch.modules() if isinstance(m, torch.nn.Linear)]
    if len(bottom) != len(ours_bottom) or len(top) != len(ours_top):
        raise SystemExit("--init holds %d bottom and %d top layers; this model has %d and %d"
                         % (len(bottom), len(top), len(ours_bottom), len(ours_top)))
    w0 = top[0][0]
    cols = list(range(dim)) + [dim + k for k in pair_permutation(features + 1)]
    top = [(w0[:, cols], top[0][1])] + top[1:]
    with torch.no_grad():
        for (w, b), lin in zip(bottom + top, ours_bottom + ours_top):
            if tuple(w.shape) != tuple(lin.weight.shape):
                raise SystemExit("--init: a layer of shape %s where the model has %s"
                                 % (tuple(w.shape), tuple(lin.weight.shape)))
            lin.weight.copy_(w)
            lin.bias.copy_(b)


def load_tables(dmp, tensors, features):
    """Each rank's shards of every table from braid's whole tables."""
    sd = dmp.state_dict()
    for f in range(features):
        whole = [v for k, v in tensors.items() if k.endswith("emb.%d.weight" % f)]
        key = [k for k in sd if k.endswith("embedding_bags.t%d.weight" % f)]
        if len(whole) != 1 or len(key) != 1:
            raise SystemExit("--init: table %d not found once in braid's or TorchRec's names" % f)
        for shard in sd[key[0]].local_shards():
            (r0, c0), (nr, nc) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.detach().copy_(whole[0][r0:r0 + nr, c0:c0 + nc])
    dmp.load_state_dict(sd)


# --- one rank ---
def build(a, meta, rank):
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.planner.types import ShardingPlan
    from torchrec.distributed.sharding_plan import (column_wise, construct_module_sharding_plan,
                                                    row_wise, table_wise)
    from torchrec.models.dlrm import DLRM, DLRMTrain
    from torchrec.modules.embedding_configs import PoolingType
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    features, rows = int(meta["features"]), int(meta["rows"])
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name="t%d" % f, embedding_dim=a.dim, num_embeddings=rows,
                                   feature_names=["f%d" % f], pooling=PoolingType.SUM)
                for f in range(features)],
        device=torch.device("meta"))
    ints = lambda s: [int(v) for v in s.split(",") if v]
    # DLRMTrain: the model and its loss, binary cross-entropy with logits.
    model = DLRMTrain(DLRM(embedding_bag_collection=ebc, dense_in_features=int(meta["dense"]),
                           dense_arch_layer_sizes=ints(a.bottom) + [a.dim],
                           over_arch_layer_sizes=ints(a.top) + [1]))
    if a.kernel == "fused":
        apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": a.lr})
    placement = plan_tables([rows] * features, a.dim, a.world, a.shard, a.plan)
    ranks = list(range(a.world))
    gen = {"table": lambda r: table_wise(rank=r, compute_kernel=a.kernel),
           "row": lambda r: row_wise(compute_kernel=a.kernel),
           "column": lambda r: column_wise(ranks=ranks, compute_kernel=a.kernel)}
    module_plan = construct_module_sharding_plan(
        ebc, {"t%d" % f: gen[k](r) for f, (k, r) in enumerate(placement)},
        world_size=a.world, local_size=a.world, device_type="cpu")
    plan = ShardingPlan({"model.sparse_arch.embedding_bag_collection": module_plan})
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan)
    tensors, _ = load_ckpt(a.init)
    load_dense(dmp.module.model, tensors, features, a.dim)  # DDP broadcast rank 0's at wrap; all load the same
    load_tables(dmp, tensors, features)
    tables = [p for n, p in dmp.named_parameters() if "embedding_bags" in n]
    mlps = [p for n, p in dmp.named_parameters() if "embedding_bags" not in n]
    # The fused kernel updates the tables inside backward; the dense one
    # leaves their gradients to this optimizer.
    opt = torch.optim.SGD(mlps if a.kernel == "fused" else mlps + tables, lr=a.lr, momentum=0.0)
    return dmp, opt, placement


def make_batch(x, y, idx, dense, features, bag):
    """TorchRec's Batch of rows idx: dense [b, D], a KeyedJaggedTensor of the
    ids (feature by feature), labels f32 [b]."""
    from torchrec import KeyedJaggedTensor
    from torchrec.datasets.utils import Batch

    rows = x[idx]
    b = len(idx)
    ids = rows[:, dense:].reshape(b, features, bag).transpose(1, 0, 2).astype(np.int64)
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=["f%d" % f for f in range(features)], values=torch.from_numpy(ids.reshape(-1)),
        lengths=torch.full((features * b,), bag, dtype=torch.int32))
    return Batch(dense_features=torch.from_numpy(rows[:, :dense]), sparse_features=kjt,
                 labels=torch.from_numpy(y[idx].astype(np.float32)))


def run_rank(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    t_setup = time.time()
    data, meta = load_ckpt(a.data)
    x = {s: data[s + "/x"].numpy() for s in ("train", "test")}
    y = {s: data[s + "/y"].numpy() for s in ("train", "test")}
    D, Fn, bag = int(meta["dense"]), int(meta["features"]), int(meta["bag"])
    n = x["train"].shape[0]
    per_epoch = n // a.batch
    if per_epoch < 1:
        raise SystemExit("--batch %d is more than the %d training samples" % (a.batch, n))
    orders = {}
    lo, hi = rank * a.batch // a.world, (rank + 1) * a.batch // a.world

    def my_rows(step):
        e = step // per_epoch
        if e not in orders:
            orders[e] = np.asarray(epoch_order(n, a.seed, e), dtype=np.int64)
        base = (step % per_epoch) * a.batch
        return orders[e][base + lo: base + hi]

    for s in range(0, a.steps, per_epoch):
        my_rows(s)  # every epoch's order before the clock starts
    dmp, opt, placement = build(a, meta, rank)
    setup_s = time.time() - t_setup

    warm = min(20, a.steps // 5)
    losses = torch.zeros(a.steps, dtype=torch.float64)
    dist.barrier()
    t0 = t_warm = time.time()
    dmp.train()
    batches = (make_batch(x["train"], y["train"], my_rows(s), D, Fn, bag) for s in range(a.steps))
    if a.pipeline == "sparse-dist":
        from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
        pipe = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
        step = lambda: pipe.progress(batches)[0]
    else:
        def step():
            loss, _ = dmp(next(batches))
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
    for s in range(a.steps):
        losses[s] = step().detach()
        if s + 1 == warm:
            t_warm = time.time()
    t_end = time.time()
    if a.pipeline == "sparse-dist":
        dmp = pipe.detach()
    measured, secs = a.steps - warm, t_end - t_warm
    if measured <= 0:
        measured, secs = a.steps, t_end - t0

    # The global batch's loss: the mean of the ranks' (equal slices, or
    # weighted by their sizes when B does not divide).
    losses *= (hi - lo) / a.batch
    dist.all_reduce(losses)

    # Test: each rank a contiguous share, the same number of batches.
    dmp.eval()
    nt = x["test"].shape[0]
    t_lo, t_hi = rank * nt // a.world, (rank + 1) * nt // a.world
    most = max((q + 1) * nt // a.world - q * nt // a.world for q in range(a.world))
    nbatch = -(-most // a.eval_batch)
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for i in range(nbatch):
            idx = np.arange(t_lo + i * a.eval_batch, min(t_hi, t_lo + (i + 1) * a.eval_batch))
            if len(idx) == 0:  # a rank with fewer samples still joins the exchange
                idx = np.arange(t_lo, t_lo + 1)
                weight = 0.0
            else:
                weight = 1.0
            batch = make_batch(x["test"], y["test"], idx, D, Fn, bag)
            logits = dmp.module.model(batch.dense_features, batch.sparse_features).squeeze(-1)
            l = F.binary_cross_entropy_with_logits(logits, batch.labels, reduction="sum")
            total += torch.tensor([float(l) * weight, len(idx) * weight], dtype=torch.float64)
    dist.all_reduce(total)

    if rank == 0:
        steps = [{"step": s, "loss": float(losses[s])} for s in range(a.steps)]
        done = {"event": "done", "model": "dlrm", "framework": "torchrec",
                "torch": torch.__version__, "world": a.world, "threads": torch.get_num_threads(),
                "kernel": a.kernel, "pipeline": a.pipeline, "shard": a.shard,
                "plan": ["%s-wise%s" % (k, "" if r is None else " rank %d" % r) for k, r in placement],
                "steps": a.steps, "batch": a.batch, "warm_steps": warm,
                "samples_per_s": measured * a.batch / secs, "train_seconds": t_end - t0,
                "setup_seconds": setup_s, "final_loss": float(losses[-1]),
                "first_losses": [float(v) for v in losses[:5]],
                "test_log_loss": float(total[0] / total[1]),
                "best_log_loss": float(meta["best_log_loss"]),
                "base_log_loss": float(meta["base_log_loss"])}
        if a.json_log:
            with open(a.json_log, "w") as f:
                for r in steps + [done]:
                    f.write(json.dumps(r) + "\n")
        print(json.dumps(done), flush=True)
    dist.barrier()
    # Out now, past the interpreter's teardown: there a joinable C++ thread
    # of the process group sometimes aborts the process ("terminate called
    # without an active exception") after all the work is done.
    sys.stderr.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = args_parser().parse_args()
    if a.world < 1 or a.batch < a.world or a.steps < 1:
        raise SystemExit("need --world >= 1, --batch >= --world and --steps >= 1")
    if a.shard == "auto" and not a.plan:
        raise SystemExit("--shard auto copies braid's plan: give --plan (the kinds in the "
                         "\"plan\" of braid's done record, comma-separated)")
    mp.spawn(run_rank, args=(a, free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
