"""Failures and launchers of backend "braid": a rank killed mid-job makes the
survivors raise a RuntimeError naming it (not hang, not time out); a
wait(timeout) that passes raises, after its timeout, and the operation still
completes later; init_process_group(timeout=...) reaches braid; BRAID_SECRET
is the secret the ranks' TCP links prove; torchrun launches it."""
import datetime
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TIMEOUT_S = 120


def worker_kill():
    rank = int(os.environ["RANK"])
    dist.init_process_group("braid", init_method="env://", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    t = torch.ones(1000)
    dist.all_reduce(t)
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            dist.all_reduce(t)
            dist.barrier()
        harness.report("error", None)
    except RuntimeError as e:
        harness.report("error", str(e))
    sys.stdout.flush()
    os._exit(0)


def worker_wait_timeout():
    rank = int(os.environ["RANK"])
    dist.init_process_group("braid", init_method="env://")
    t = torch.zeros(4)
    if rank == 0:
        w = dist.irecv(t, src=1, tag=5)
        t0 = time.monotonic()
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=200))
            harness.report("timeout_error", None)
        except RuntimeError as e:
            harness.report("timeout_error", str(e))
        harness.report("waited_s", time.monotonic() - t0)
        assert not w.is_completed()
        dist.send(torch.ones(1), dst=1, tag=6)  # now let rank 1 send
        w.wait()
        assert torch.all(t == 7), t
    else:
        dist.recv(torch.zeros(1), src=0, tag=6)
        dist.send(torch.full((4,), 7.0), dst=0, tag=5)
    harness.report("done", True)
    harness.finish()


def worker_group_timeout():
    # Rank 1 never joins the all_reduce; rank 0's fails at the group's
    # timeout (2 s, not the 300 s default) and names what it waited for.
    rank = int(os.environ["RANK"])
    dist.init_process_group("braid", init_method="env://", timeout=datetime.timedelta(seconds=2))
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(8))
            harness.report("error", None)
        except RuntimeError as e:
            harness.report("error", str(e))
        harness.report("waited_s", time.monotonic() - t0)
        store.set("rank0_done", "1")
        store.wait(["rank1_done"], datetime.timedelta(seconds=120))  # rank 0 hosts the store
    else:
        store.wait(["rank0_done"], datetime.timedelta(seconds=120))
        store.set("rank1_done", "1")
    sys.stdout.flush()
    os._exit(0)


def worker_secret():
    # BRAID_SECRET comes from each rank's environment (set by the driver);
    # TCP links prove it, so two ranks with different secrets must not link.
    dist.init_process_group("braid", init_method="env://", timeout=datetime.timedelta(seconds=20))
    t = torch.full((3,), float(dist.get_rank() + 1))
    try:
        dist.all_reduce(t)
        harness.report("sum", t.tolist())
    except RuntimeError as e:
        harness.report("error", str(e))
    sys.stdout.flush()
    os._exit(0)


def worker_torchrun():
    dist.init_process_group("braid")
    t = torch.full((3,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    print("torchrun rank %d of %d: %s" % (dist.get_rank(), dist.get_world_size(), t.tolist()), flush=True)
    harness.finish()


def main():
    res = harness.spawn(__file__, 3, ["kill"], expect_ok=False)
    assert res[2][0] == -signal.SIGKILL, "rank 2 was meant to die by SIGKILL: %s" % (res[2][0],)
    for rank in (0, 1):
        rc, rep, se = res[rank]
        assert rc == 0, "survivor %d exited %s:\n%s" % (rank, rc, se[-3000:])
        msg = rep.get("error")
        assert msg, "survivor %d saw no error after rank 2 died" % rank
        assert "rank 2" in msg and "timed out" not in msg.lower(), "survivor %d: %s" % (rank, msg)
        print("survivor %d raised: %s" % (rank, msg.splitlines()[0][:200]))

    res = harness.spawn(__file__, 2, ["wait_timeout"])
    msg = res[0][1]["timeout_error"]
    assert msg and " Timed out in wait(timeout=200 ms)" in msg, msg
    # The wait must have lasted its timeout: one that gave up at once would
    # print the same message. The upper bound is loose (two ranks, 2 cores).
    waited = res[0][1]["waited_s"]
    assert 0.19 <= waited < 30, "wait(timeout=200 ms) returned after %.3f s" % waited
    assert all(r[1]["done"] for r in res)
    print("wait(timeout) raised, then completed: %s" % msg)

    res = harness.spawn(__file__, 2, ["group_timeout"])
    msg = res[0][1]["error"]
    assert msg and "after 2.0000 s timed out" in msg and "rank 1" in msg, msg
    waited = res[0][1]["waited_s"]
    assert 1.95 <= waited < 60, "the 2 s group timeout fired after %.3f s" % waited
    print("init_process_group(timeout=2 s) reached braid: %s" % msg.splitlines()[0][:200])

    # BRAID_SECRET: the same on both ranks links them over TCP; a rank with
    # another secret is refused by the handshake. Were the variable ignored,
    # both ranks would use the secret rank 0 publishes, and both would link.
    tcp = {"BRAID_TRANSPORT": "tcp"}
    res = harness.spawn(__file__, 2, ["secret"], env=dict(tcp, BRAID_SECRET="same-on-both"))
    for rank in (0, 1):
        assert res[rank][1].get("sum") == [3.0, 3.0, 3.0], "rank %d: %s" % (rank, res[rank][1])
    port = harness.free_port()
    procs = []
    for rank, secret in ((0, "secret-of-rank-0"), (1, "secret-of-rank-1")):
        e = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), OMP_NUM_THREADS="1", BRAID_SECRET=secret, **tcp)
        procs.append(subprocess.Popen([harness.PYTHON, __file__, "--worker", "secret"], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=240) for p in procs]
    texts = [so + se for so, se in outs]
    assert not any('"sum"' in t for t in texts), "ranks with different BRAID_SECRETs linked:\n%s" % texts
    assert any("failed to prove the job secret" in t for t in texts), \
        "no rank named the secret as the reason:\n%s" % "\n---\n".join(t[-2000:] for t in texts)
    print("BRAID_SECRET: the same links the ranks; different ones are refused by the handshake")

    # torchrun (torch.distributed.run)
    p, _ = harness.torchrun(__file__, 2, ["torchrun"])
    for r in range(2):
        line = "torchrun rank %d of 2: [3.0, 3.0, 3.0]" % r
        assert line in p.stdout, "missing %r in torchrun's output:\n%s" % (line, p.stdout)
    print("torchrun: both ranks all_reduced")


if __name__ == "__main__":
    import braid_torch  # noqa: F401
    if harness.is_worker():
        {"kill": worker_kill, "wait_timeout": worker_wait_timeout,
         "group_timeout": worker_group_timeout, "secret": worker_secret,
         "torchrun": worker_torchrun}[harness.worker_args()[0]]()
    else:
        main()
