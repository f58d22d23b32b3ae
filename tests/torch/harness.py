"""Runs a test script's ranks as real processes and checks what they report.

A script calls `main(worker, worlds)` when run without arguments: for each
world size it starts that many copies of itself (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in their environment, like torchrun) and fails
unless every rank exits 0. A rank reports values with `report(key, value)`;
the driver gets them back as {rank: {key: value}} from `spawn`.
"""
import json
import os
import random
import socket
import subprocess
import sys
import time

PYTHON = sys.executable
REPORT = "BRAID_TORCH_REPORT "


def free_port():
    """A port on 127.0.0.1 nothing is bound to now, drawn below the kernel's
    ephemeral range (tests/support/ports.h says why)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    draw = random.Random()
    for _ in range(100):
        port = draw.randint(10000, max(11000, low) - 2)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below %d after 100 draws" % low)


def spawn(script, world, args=(), env=None, timeout=240, expect_ok=True):
    """Starts `world` ranks of `script`; returns [(rc, reports, stderr)] by rank.
    `env` adds variables to each rank's environment; a value None removes one."""
    port = free_port()
    procs = []
    for rank in range(world):
        e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        e.update(env or {})
        e = {k: v for k, v in e.items() if v is not None}
        procs.append(subprocess.Popen([PYTHON, script, "--worker", *map(str, args)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            so, se = p.communicate()
            se += "\n[harness: killed after %d s]" % timeout
        reports = {}
        for line in so.splitlines():
            if line.startswith(REPORT):
                k, v = json.loads(line[len(REPORT):])
                reports[k] = v
        out.append((p.returncode, reports, se))
    if expect_ok:
        for rank, (rc, _, se) in enumerate(out):
            if rc != 0:
                raise AssertionError("%s rank %d of %d exited %s:\n%s" % (script, rank, world, rc, se[-4000:]))
    return out


def torchrun(script, nproc, args=(), timeout=240):
    """Runs `script --worker args` under torchrun (this interpreter's
    torch.distributed.run) with `nproc` ranks on this host; returns
    (CompletedProcess, {key: value} its ranks reported; ranks reporting the
    same key must agree). Fails unless torchrun exits 0."""
    # torchrun's agent crashes on Python 3.11 unless --redirects/--tee name a
    # rank (9) that does not exist.
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=%d" % nproc,
           "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % free_port(), "--redirects", "9:0",
           "--tee", "9:0", script, "--worker", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        raise AssertionError("torchrun %s exited %d:\n%s\n%s" % (script, p.returncode, p.stdout[-2000:],
                                                                p.stderr[-3000:]))
    # The ranks share torchrun's stdout, where two ranks' reports may run
    # together on one line: each is read from its marker on.
    reports = {}
    dec = json.JSONDecoder()
    for chunk in p.stdout.split(REPORT)[1:]:
        (k, v), _ = dec.raw_decode(chunk)
        if k in reports and reports[k] != v:
            raise AssertionError("torchrun ranks reported different %s: %r, %r" % (k, reports[k], v))
        reports[k] = v
    return p, reports


def report(key, value):
    print(REPORT + json.dumps([key, value]), flush=True)


def mean_over_ranks(loss):
    """A rank's loss averaged over the group (one all_reduce), as a float."""
    import torch.distributed as dist
    t = loss.detach().clone()
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def finish():
    """Ends a rank: a barrier, then _exit (a gloo group can hang in its destructor)."""
    import torch.distributed as dist
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def is_worker():
    return len(sys.argv) > 1 and sys.argv[1] == "--worker"


def worker_args():
    return sys.argv[2:]
