"""Runs PyTorch's own distributed test suite with the "braid" backend.

The suite is the one torch ships: DistributedTest._DistTestBase in
torch/testing/_internal/distributed/distributed_test.py, which PyTorch's
test/distributed/test_distributed_spawn.py drives with the environment
variables BACKEND, WORLD_SIZE, INIT_METHOD and TEMP_DIR. This script is
that driver for braid (and for gloo, the reference), on torch 1.13 and 2.x.

Usage:
  test_torch_suite.py              the fast subset (FAST) with braid at world
                                   sizes 2 and 3; fails unless each test passes
                                   (what ctest runs)
  test_torch_suite.py --full [--backends braid,gloo] [--worlds 2,3] [-k PATTERN]
                                   the whole suite; prints passed / failed+errors /
                                   skipped per backend and world size, and the
                                   tests braid fails that gloo passes
  test_torch_suite.py --one BACKEND WORLD [TEST ...]
                                   one configuration in this process (used by the
                                   two modes above; prints one SUITE_RESULT line)

Gates opened (the patch, in this file only; torch's files are not edited).
The suite decides at import time which tests a backend runs, by comparing
the backend's name with "gloo" (`BACKEND != "gloo"`, `require_backend({"gloo"})`,
`BACKEND in DistTestCases.backend_feature["ddp"]`, ...). Those gates name
the backend, not a feature torch checks, so braid would skip every test gloo
runs on CPU. The module is imported with one source line changed:
`BACKEND = os.environ["BACKEND"]` becomes `BACKEND = _gate_name(...)`, a str
equal to "braid" that also compares (and hashes) equal to "gloo" -- only the
suite module's own BACKEND variable; torch.distributed gets the plain name
"braid" (init_process_group lowercases it into a plain str), so every
collective runs on braid. The tests then run are exactly gloo's. Besides, "braid" joins DistTestCases.backend_feature["plugin"],
torch's list of third-party backends, which the suite's availability check
(require_backend_is_available on torch 2.x) accepts.

Excepted (EXCEPTED below): tests whose failure comes from torch's own Python
API refusing every backend but gloo, not from the backend.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Fast subset run by ctest: each test gloo passes on CPU and that exercises a
# different backend method (< 60 s for both world sizes on an idle machine).
FAST = [
    "test_all_reduce_coalesced_sum",
    "test_all_gather_coalesced_simple",
    "test_barrier_timeout_full_group",
    "test_batch_isend_irecv_gloo",
    "test_all_gather_object_default_pg",
    "test_monitored_barrier_gloo",
    "test_sparse_all_reduce_sum",
    "test_send_recv_any_source",
]

# Tests torch's own Python API refuses for every backend but gloo (so no
# backend can pass them under another name), by torch major version.
EXCEPTED = {
    # torch 1.13's dist.monitored_barrier raises "monitored_barrier is only
    # implemented for GLOO backend" before it reaches the backend.
    1: {
        "test_monitored_barrier_allreduce_hang",
        "test_monitored_barrier_allreduce_hang_wait_all_ranks",
        "test_monitored_barrier_failure_order",
        "test_monitored_barrier_gloo",
        "test_monitored_barrier_gloo_subgroup",
        "test_monitored_barrier_wait_all_ranks",
        "test_ddp_model_diff_across_ranks",
        "test_ddp_model_diff_shape_across_ranks",
        "test_ddp_model_diff_num_params_across_ranks",
    },
    # torch 2.x's ProcessGroup names every third-party backend "custom"
    # (ProcessGroup::getBackendName, from its backend type), and DDP's
    # logger records that, where the test expects dist.get_backend():
    # torch's code, not the backend's, decides it.
    2: {
        "test_ddp_logging_data_cpu",
    },
}

RESULT = "SUITE_RESULT "


def _gate_name(name):
    """The suite's BACKEND for `name`: "braid" that the gates take for gloo."""
    if name != "braid":
        return name

    class GateName(str):
        def __eq__(self, other):
            return other in ("gloo", "braid") if isinstance(other, str) else NotImplemented

        def __ne__(self, other):
            r = self.__eq__(other)
            return r if r is NotImplemented else not r

        def __hash__(self):
            return hash("gloo")

    return GateName(name)


def _import_suite():
    """Imports distributed_test with its BACKEND line patched (see the top)."""
    import importlib.util
    import torch.testing._internal.common_distributed as common  # noqa: F401

    # torch's own list of third-party backends (DistTestCases.backend_feature
    # ["plugin"]): the suite's "is this backend available" check accepts them.
    common.DistTestCases.backend_feature["plugin"].add("braid")
    name = "torch.testing._internal.distributed.distributed_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    src = spec.loader.get_source(name)
    line = 'BACKEND = os.environ["BACKEND"]'
    if src.count(line) != 1:
        raise RuntimeError("%s: expected one line %r to patch, found %d" % (spec.origin, line, src.count(line)))
    src = src.replace(line, 'BACKEND = _gate_name(os.environ["BACKEND"])')
    mod = importlib.util.module_from_spec(spec)
    mod._gate_name = _gate_name
    sys.modules[name] = mod
    exec(compile(src, spec.origin, "exec"), mod.__dict__)
    return mod


def _suite_class():
    """TestDistBackendWithSpawn as test_distributed_spawn.py builds it."""
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    if os.environ["BACKEND"] == "braid":
        import braid_torch  # noqa: F401  registers the backend
    dt = _import_suite()

    class TestDistBackendWithSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()

    # Pickled by name for the spawned ranks, which import this file as
    # __main__ and build the class again at the top level.
    TestDistBackendWithSpawn.__module__ = "__main__"
    TestDistBackendWithSpawn.__qualname__ = "TestDistBackendWithSpawn"
    return TestDistBackendWithSpawn


def _set_env(backend, world):
    os.environ["BACKEND"] = backend
    os.environ["WORLD_SIZE"] = str(world)
    os.environ.setdefault("INIT_METHOD", "env://")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "TEMP_DIR" not in os.environ:
        os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="braid_torch_suite_")


# The spawned ranks import this file as their main module: the class must
# exist at import time there, built from the environment the parent set.
if os.environ.get("BRAID_TORCH_SUITE_CHILD") == "1":
    TestDistBackendWithSpawn = _suite_class()


def run_one(backend, world, names):
    """Runs one configuration here; prints RESULT with the counts and names."""
    import unittest
    _set_env(backend, world)
    os.environ["BRAID_TORCH_SUITE_CHILD"] = "1"
    cls = _suite_class()
    globals()["TestDistBackendWithSpawn"] = cls
    loader = unittest.TestLoader()
    if not names:
        names = loader.getTestCaseNames(cls)
    suite = unittest.TestSuite(cls(n) for n in names)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(suite)
    bad = sorted({t.id().rsplit(".", 1)[-1] for t, _ in result.failures + result.errors})
    skipped = [t.id().rsplit(".", 1)[-1] for t, _ in result.skipped]
    passed = [n for n in names if n not in bad and n not in skipped]
    print(RESULT + json.dumps({"backend": backend, "world": world, "passed": sorted(passed),
                               "failed": sorted(bad), "skipped": sorted(skipped)}), flush=True)


def spawn_one(backend, world, names, timeout):
    env = dict(os.environ)
    env.pop("BRAID_TORCH_SUITE_CHILD", None)
    env["TEMP_DIR"] = tempfile.mkdtemp(prefix="braid_torch_suite_")
    cmd = [sys.executable, os.path.abspath(__file__), "--one", backend, str(world), *names]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        # The runner names each test on stderr as it starts (verbosity 2):
        # the last lines say which one hung.
        err = e.stderr or ""
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        started = [l for l in err.splitlines() if l.startswith("test_") and " ... " in l]
        raise AssertionError("%s %s world %d: no result after %d s, in %s; the run's stderr "
                             "ends:\n%s" % (os.path.basename(__file__), backend, world, timeout,
                                            started[-1] if started else "no test yet",
                                            err[-6000:])) from None
    for line in p.stdout.splitlines():
        if line.startswith(RESULT):
            r = json.loads(line[len(RESULT):])
            r["seconds"] = round(time.monotonic() - t0)
            r["log"] = p.stderr
            return r
    raise AssertionError("%s exited %d without a result:\n%s" % (cmd, p.returncode, p.stderr[-6000:]))


def _major():
    import torch
    return int(torch.__version__.split(".")[0])


# Exit status of the fast subset when the suite cannot be imported because
# torch's test utilities lack a module they import (expecttest, which Debian's
# python3-torch does not depend on): ctest counts it as skipped
# (SKIP_RETURN_CODE in python/CMakeLists.txt) and prints the reason.
SKIP = 77


def fast():
    try:
        import torch.testing._internal.common_utils  # noqa: F401
    except ImportError as e:
        print("SKIPPED: torch's test utilities cannot be imported (%s); "
              "pip install expecttest" % e)
        raise SystemExit(SKIP)
    excepted = EXCEPTED.get(_major(), set())
    names = [n for n in FAST if n not in excepted]
    problems = []
    for world in (2, 3):
        r = spawn_one("braid", world, names, timeout=280)
        print("braid world %d: %d passed, %d failed, %d skipped (%d s)" % (
            world, len(r["passed"]), len(r["failed"]), len(r["skipped"]), r["seconds"]))
        if r["failed"]:
            problems.append("world %d failed %s" % (world, r["failed"]))
        if not r["passed"]:
            problems.append("world %d passed nothing" % world)
    if problems:
        raise SystemExit("FAIL: " + "; ".join(problems))
    print("ok")


def full(backends, worlds, pattern):
    import torch
    excepted = EXCEPTED.get(_major(), set())
    names = []
    if pattern:
        _set_env("gloo", 2)
        names = [n for n in dir(_suite_class()) if n.startswith("test_") and pattern in n]
    results = {}
    for world in worlds:
        for backend in backends:
            r = spawn_one(backend, world, names, timeout=7200)
            results[(backend, world)] = r
            log = os.path.join(tempfile.gettempdir(), "braid_torch_suite_%s_%s_%d.log" % (
                torch.__version__.split("+")[0], backend, world))
            with open(log, "w") as f:
                f.write(r["log"])
            print("%s world %d: log in %s" % (backend, world, log), flush=True)
    print("torch %s" % torch.__version__)
    print("| backend | world | passed | failed + errors | skipped |")
    print("|---|---|---|---|---|")
    for (backend, world), r in results.items():
        print("| %s | %d | %d | %d | %d |" % (backend, world, len(r["passed"]), len(r["failed"]),
                                              len(r["skipped"])))
    for world in worlds:
        if ("gloo", world) in results and ("braid", world) in results:
            gp = set(results[("gloo", world)]["passed"])
            bf = sorted(n for n in results[("braid", world)]["failed"] if n in gp)
            ex = [n for n in bf if n in excepted]
            real = [n for n in bf if n not in excepted]
            print("world %d: braid fails %d that gloo passes: %s" % (world, len(real), real))
            if ex:
                print("world %d: excepted (torch's API refuses non-gloo): %s" % (world, ex))
    for (backend, world), r in results.items():
        if r["failed"]:
            print("%s world %d failed: %s" % (backend, world, r["failed"]))


def main(argv):
    if argv[:1] == ["--one"]:
        run_one(argv[1], int(argv[2]), argv[3:])
    elif argv[:1] == ["--full"]:
        backends, worlds, pattern = ["braid", "gloo"], [2, 3], None
        i = 1
        while i < len(argv):
            if argv[i] == "--backends":
                backends = argv[i + 1].split(",")
            elif argv[i] == "--worlds":
                worlds = [int(w) for w in argv[i + 1].split(",")]
            elif argv[i] == "-k":
                pattern = argv[i + 1]
            else:
                raise SystemExit("unknown argument %s" % argv[i])
            i += 2
        full(backends, worlds, pattern)
    elif not argv:
        fast()
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
