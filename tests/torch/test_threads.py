"""Compute threads under backend "braid" (python/braid_torch/threads.h): with
several ranks on the host and neither OMP_NUM_THREADS nor
OPENBLAS_NUM_THREADS set, the first group lowers torch's intra-op threads and
the loaded OpenBLAS's pool to cores // ranks; a set variable, a lone rank on
the host, a later group and a later torch.set_num_threads are left alone.

Where collectives run (threads.h, collectives_inline): on the issuing thread
when the host's ranks x torch's threads (after the cap) take every core, so
an async all_reduce has finished when the call returns; else on braid's
thread, so it has not while the peer is late; BRAID_TORCH_INLINE=1 / 0
decides instead, and another value is refused by name."""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

UNSET = {"OMP_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": None}


def openblas():
    """The OpenBLAS torch loaded, or None (another BLAS)."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0", mode=os.RTLD_NOLOAD)
    except OSError:
        return None
    return lib if hasattr(lib, "openblas_get_num_threads") else None


def threads():
    b = openblas()
    return {"torch": torch.get_num_threads(), "blas": b.openblas_get_num_threads() if b else None}


def worker():
    harness.report("cores", len(os.sched_getaffinity(0)))
    harness.report("before", threads())
    dist.init_process_group("braid", init_method="env://")
    harness.report("after", threads())
    # Rank 1 joins a second late: on braid's thread, rank 0's async
    # all_reduce is still running when the call returns; on the issuing
    # thread, the call returns it finished. (The barrier lines the ranks
    # up first: their inits return at different times.)
    t = torch.ones(1 << 18)
    dist.barrier()
    if dist.get_rank() == 1:
        time.sleep(1.0)
    w = dist.all_reduce(t, async_op=True)
    harness.report("finished_at_issue", w.is_completed())
    w.wait()
    assert t[0].item() == dist.get_world_size()
    # The user's own choice after init stands, through a later group too.
    torch.set_num_threads(2)
    dist.new_group(list(range(dist.get_world_size())))
    harness.report("later_group", threads())
    harness.finish()


def capped(before, cap):
    return {k: (min(v, cap) if v is not None else None) for k, v in before.items()}


def main():
    import braid_torch  # noqa: F401  (the build tree must provide it)
    res = harness.spawn(__file__, 2, env=UNSET)
    for rank, (_, rep, _) in enumerate(res):
        cap = max(1, rep["cores"] // 2)
        assert rep["after"] == capped(rep["before"], cap), (rank, rep)
        if rep["before"]["blas"] is not None and rep["cores"] >= 2:
            # OpenBLAS starts with a thread per core: the cap must have lowered it.
            assert rep["before"]["blas"] > cap and rep["after"]["blas"] == cap, (rank, rep)
        assert rep["later_group"]["torch"] == 2, (rank, rep)
        print("rank %d, %d cores, 2 ranks: %s -> %s" % (rank, rep["cores"], rep["before"], rep["after"]))
    for env, why in (({"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": None}, "OMP_NUM_THREADS set"),
                     ({"OMP_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": "2"}, "OPENBLAS_NUM_THREADS set")):
        for _, rep, _ in harness.spawn(__file__, 2, env=env):
            assert rep["after"] == rep["before"], (why, rep)
        print("%s: left alone" % why)
    for _, rep, _ in harness.spawn(__file__, 1, env=UNSET):
        assert rep["after"] == rep["before"], ("one rank", rep)
    print("one rank on the host: left alone")
    # Where collectives run: by the rule, then as the variable says.
    for env, want in ((UNSET, None), (dict(UNSET, BRAID_TORCH_INLINE="0"), False),
                      (dict(UNSET, BRAID_TORCH_INLINE="1"), True)):
        rep = harness.spawn(__file__, 2, env=env)[0][1]
        if want is None:
            want = 2 * rep["after"]["torch"] >= rep["cores"]
        assert rep["finished_at_issue"] == want, (env, want, rep)
        print("BRAID_TORCH_INLINE=%s: collectives on the %s thread" % (
            env.get("BRAID_TORCH_INLINE", "(unset)"), "issuing" if want else "background"))
    bad = harness.spawn(__file__, 2, env=dict(UNSET, BRAID_TORCH_INLINE="yes"), expect_ok=False)
    assert all(rc != 0 and "BRAID_TORCH_INLINE is 'yes'" in se for rc, _, se in bad), bad
    print("BRAID_TORCH_INLINE=yes: refused by name")


if __name__ == "__main__":
    if harness.is_worker():
        import braid_torch  # noqa: F401
        worker()
    else:
        main()
