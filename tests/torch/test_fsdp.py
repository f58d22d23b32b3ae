"""FullyShardedDataParallel on CPU with backend "braid" gives Gloo's losses.

torch 2.x only (torch 1.13's FSDP needs CUDA): exits 77, which ctest reports
as skipped, on an older torch. The same MLP, each Linear its own FSDP unit
(several all_gathers and reduce_scatters a step, through
all_gather_into_tensor and reduce_scatter_tensor), trained 12 steps at
world 2 with each sharding strategy -- FULL_SHARD, SHARD_GRAD_OP,
NO_SHARD and HYBRID_SHARD (sharded within the host, replicated across:
here one host, so one replica) -- with braid and with gloo; per-step
losses within 1e-6 of gloo's, and the full state dict gathered on rank 0
equal to gloo's within 1e-6.
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

STRATEGIES = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]
STEPS = 12


def run(strategy):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    from torch.distributed.fsdp import StateDictType, FullStateDictConfig
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    model = FSDP(net, sharding_strategy=getattr(ShardingStrategy, strategy),
                 auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), device_id=torch.device("cpu"),
                 use_orig_params=True)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x = torch.randn(32, 64, generator=g)
        y = (x @ teacher).argmax(-1)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(harness.mean_over_ranks(loss))
    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        sd = model.state_dict()
    flat = torch.cat([v.flatten() for _, v in sorted(sd.items())]).tolist() if dist.get_rank() == 0 else []
    return losses, flat


def worker():
    backend = harness.worker_args()[0]
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="env://")
    for s in STRATEGIES:
        losses, flat = run(s)
        harness.report(s, losses)
        harness.report(s + "/weights", flat)
    harness.finish()


def main():
    major = int(torch.__version__.split(".")[0])
    if major < 2:
        print("skipped: torch %s's FSDP needs CUDA (torch 2.x runs it on CPU)" % torch.__version__)
        sys.exit(77)
    got = {b: harness.spawn(__file__, 2, [b]) for b in ("braid", "gloo")}
    for s in STRATEGIES:
        braid, gloo = got["braid"][0][1][s], got["gloo"][0][1][s]
        assert len(braid) == STEPS and len(gloo) == STEPS, (s, braid, gloo)
        for i, (x, y) in enumerate(zip(braid, gloo)):
            assert abs(x - y) <= 1e-6 * max(1.0, abs(y)), "%s step %d: braid %r, gloo %r" % (s, i, x, y)
        assert braid[-1] < braid[0], "%s did not learn: %s" % (s, braid)
        wb, wg = got["braid"][0][1][s + "/weights"], got["gloo"][0][1][s + "/weights"]
        assert len(wb) == len(wg) and len(wb) > 0, (s, len(wb), len(wg))
        worst = max(abs(a - b) for a, b in zip(wb, wg))
        assert worst <= 1e-6, "%s: gathered weights differ from gloo's by %g" % (s, worst)
        print("%-14s %d per-step losses within 1e-6 of gloo's (first %.6f last %.6f); %d gathered weights "
              "within %.1e" % (s, STEPS, braid[0], braid[-1], len(wb), worst))


if __name__ == "__main__":
    import braid_torch  # noqa: F401
    if harness.is_worker():
        worker()
    else:
        main()
