"""Compute threads under backend "braid" (python/braid_torch/threads.h): with
several ranks on the host and neither OMP_NUM_THREADS nor
OPENBLAS_NUM_THREADS set, the first group lowers torch's intra-op threads and
the loaded OpenBLAS's pool to cores // ranks; a set variable, a lone rank on
the host, a later group and a later torch.set_num_threads are left alone."""
import ctypes
import os
import sys

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


if __name__ == "__main__":
    if harness.is_worker():
        import braid_torch  # noqa: F401
        worker()
    else:
        main()
