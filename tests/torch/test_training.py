"""Training with backend "braid" gives Gloo's losses.

1. Seed 002's program: an `average_gradients` helper that all_reduces each
   param.grad and divides by the world size, inside a synchronous SGD loop
   over a partitioned data set, small network; world 2 and 3. Per-epoch
   losses equal Gloo's (to fp32 rounding: the two backends may add three
   ranks' gradients in different orders).
2. DistributedDataParallel on an MLP, 20 steps, then the same with
   ZeroRedundancyOptimizer: per-step losses within 1e-6 of Gloo's; then
   the DDP and ZeRO runs again with both backends launched by torchrun.
"""
import os
import sys
from random import Random

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.optim as optim  # noqa: E402


# ---- seed 002's program -------------------------------------------------
class Partition:
    def __init__(self, data, index):
        self.data, self.index = data, index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        return self.data[self.index[i]]


class DataPartitioner:
    def __init__(self, data, sizes, seed=1234):
        self.data, self.partitions = data, []
        rng = Random()
        rng.seed(seed)
        indexes = list(range(len(data)))
        rng.shuffle(indexes)
        for frac in sizes:
            n = int(frac * len(data))
            self.partitions.append(indexes[:n])
            indexes = indexes[n:]

    def use(self, partition):
        return Partition(self.data, self.partitions[partition])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def dataset():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(384, 20, generator=g)
    y = (x[:, :4].argmax(1) + (x[:, 4] > 1).long()) % 4
    return [(x[i], y[i]) for i in range(len(x))]


def partition_dataset():
    size = dist.get_world_size()
    bsz = 128 // size
    partition = DataPartitioner(dataset(), [1.0 / size] * size).use(dist.get_rank())
    return torch.utils.data.DataLoader(partition, batch_size=bsz, shuffle=True,
                                       generator=torch.Generator().manual_seed(dist.get_rank()))


def average_gradients(model):
    size = float(dist.get_world_size())
    for param in model.parameters():
        dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
        param.grad.data /= size


def run_seed002():
    torch.manual_seed(1234)
    train_set = partition_dataset()
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    losses = []
    for epoch in range(4):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        losses.append(epoch_loss / len(train_set))
    return losses


# ---- DDP and ZeroRedundancyOptimizer ------------------------------------
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def run_ddp(zero):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(mlp(), bucket_cap_mb=0.1)  # several buckets: overlapped all_reduces
    if zero:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optim.Adam, lr=1e-3)
    else:
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(20):
        x = torch.randn(32, 64, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(harness.mean_over_ranks(loss))
    return losses


def worker():
    mode, backend = harness.worker_args()
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="env://")
    if mode == "seed002":
        harness.report("losses", run_seed002())
    else:
        harness.report("ddp", run_ddp(False))
        harness.report("zero", run_ddp(True))
    harness.finish()


def close(a, b, tol, what):
    assert len(a) == len(b) and len(a) > 0, what
    for i, (x, y) in enumerate(zip(a, b)):
        assert abs(x - y) <= tol * max(1.0, abs(y)), "%s step %d: braid %r, gloo %r" % (what, i, x, y)


def main():
    for world in (2, 3):
        got = {b: harness.spawn(__file__, world, ["seed002", b]) for b in ("braid", "gloo")}
        braid = got["braid"][0][1]["losses"]
        gloo = got["gloo"][0][1]["losses"]
        close(braid, gloo, 1e-6, "seed 002 world %d" % world)
        assert braid[-1] < braid[0], "seed 002 did not learn: %s" % braid
        print("seed 002 world %d: per-epoch losses %s (gloo %s)" % (world, braid, gloo))
    got = {b: harness.spawn(__file__, 2, ["ddp", b]) for b in ("braid", "gloo")}
    for key in ("ddp", "zero"):
        braid, gloo = got["braid"][0][1][key], got["gloo"][0][1][key]
        close(braid, gloo, 1e-6, key)
        print("%s: 20 per-step losses within 1e-6 of gloo's (first %.6f last %.6f)" % (key, braid[0], braid[-1]))
    # The same DDP run launched by torchrun (env:// from its agent).
    got = {b: harness.torchrun(__file__, 2, ["ddp", b])[1] for b in ("braid", "gloo")}
    for key in ("ddp", "zero"):
        assert len(got["braid"][key]) == 20, got["braid"]
        close(got["braid"][key], got["gloo"][key], 1e-6, "torchrun " + key)
    print("torchrun: ddp and zero, 20 per-step losses each within 1e-6 of gloo's")


if __name__ == "__main__":
    if harness.is_worker():
        import braid_torch  # noqa: F401
        worker()
    else:
        import braid_torch  # noqa: F401
        main()
