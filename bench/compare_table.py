#!/usr/bin/python3
"""Turns the JSON rows that bench/compare_mpi.sh collected into markdown
tables (medians over rounds) and PASS/FAIL lines for the project's targets.

    compare_table.py RESULTS.jsonl [--md FILE] [--command "..."] [--notes FILE]

Each input line is one row of `braid bench --json` or `mpi_bench`, tagged by
the script with config, tool (braid | mpi | mpi_keepmem), round and n; a run
that failed is a line with an "error" field instead. Standard library only.
"""
import argparse
import collections
import datetime
import json
import statistics
import subprocess
import sys

TOOLS = ("braid", "mpi", "mpi_keepmem")

# config id -> (title, ranks, op, transport). The order is the report's order.
CONFIGS = collections.OrderedDict([
    ("ar2_shm", ("all_reduce, 2 ranks, shared memory", 2, "all_reduce", "shm")),
    ("ar2_tcp", ("all_reduce, 2 ranks, TCP loopback", 2, "all_reduce", "tcp")),
    ("ar4_over", ("all_reduce, 4 ranks on 2 cores (oversubscribed)", 4, "all_reduce", "shm")),
    ("ar8_over", ("all_reduce, 8 ranks on 2 cores (oversubscribed)", 8, "all_reduce", "shm")),
    ("ag2_shm", ("all_gather, 2 ranks, shared memory", 2, "all_gather", "shm")),
    ("rs2_shm", ("reduce_scatter, 2 ranks, shared memory", 2, "reduce_scatter", "shm")),
    ("bc2_shm", ("broadcast, 2 ranks, shared memory", 2, "broadcast", "shm")),
    ("a2a2_shm", ("all_to_all, 2 ranks, shared memory", 2, "all_to_all", "shm")),
])
MiB = 1 << 20


def human(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return "%d %s" % (nbytes // scale, unit)
    return "%d B" % nbytes


class Cell:
    """Median of one (config, tool, bytes) over the rounds that produced it."""

    def __init__(self, rows):
        self.n = len(rows)
        self.time_us = statistics.median(r["time_us"] for r in rows)
        self.busbw = statistics.median(r["busbw_gbs"] for r in rows)
        self.wrong = sum(int(r.get("wrong", 0)) for r in rows)
        self.spread = (max(r["busbw_gbs"] for r in rows) - min(r["busbw_gbs"] for r in rows))


def load(path):
    cells = collections.defaultdict(list)   # (config, tool, bytes) -> rows
    runs, busy = set(), set()               # (config, tool, round, part)
    errors = collections.defaultdict(list)  # (config, tool) -> messages
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            key = (r.get("config"), r.get("tool"), r.get("round"), r.get("part"))
            runs.add(key)
            if r.get("busy", 0) >= 25:
                busy.add(key)
            if "error" in r:
                errors[(r["config"], r["tool"])].append(r["error"])
                continue
            if "busbw_gbs" not in r or "bytes" not in r:
                continue
            cells[(r["config"], r["tool"], int(r["bytes"]))].append(r)
    return {k: Cell(v) for k, v in cells.items()}, errors, len(runs), len(busy)


def fmt_time(c):
    return "—" if c is None else ("%.2f" % c.time_us if c.time_us < 100 else "%.0f" % c.time_us)


def fmt_bw(c):
    if c is None:
        return "—"
    s = "%.3f" % c.busbw if c.busbw < 1 else "%.2f" % c.busbw
    return s + (" **WRONG %d**" % c.wrong if c.wrong else "")


def fmt_ratio(a, b):
    if a is None or b is None or b.busbw <= 0:
        return "—"
    return "%.2f×" % (a.busbw / b.busbw)


def table(cells, config, tools):
    sizes = sorted({b for (c, t, b) in cells if c == config})
    if not sizes:
        return ["(no results)"]
    have = [t for t in TOOLS if t in tools]
    head = ["size"]
    head += ["%s time µs" % label(t) for t in have]
    head += ["%s busbw GB/s" % label(t) for t in have]
    head += ["braid / MPI", "braid / MPI*"] if "mpi_keepmem" in have else ["braid / MPI"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for b in sizes:
        get = lambda t: cells.get((config, t, b))
        row = [human(b)]
        row += [fmt_time(get(t)) for t in have]
        row += [fmt_bw(get(t)) for t in have]
        row.append(fmt_ratio(get("braid"), get("mpi")))
        if "mpi_keepmem" in have:
            row.append(fmt_ratio(get("braid"), get("mpi_keepmem")))
        out.append("| " + " | ".join(row) + " |")
    return out


def label(tool):
    return {"braid": "braid", "mpi": "MPI", "mpi_keepmem": "MPI*"}[tool]


class Targets:
    """PASS/FAIL lines for the targets. A target whose braid result is
    missing fails: braid crashing or timing out on a configuration is a
    defect, not a reason to pass. NOT RUN is kept for configurations no tool
    ran (ONLY=...) and for every target when braid was left out on purpose
    (BRAID=0, --no-braid)."""

    def __init__(self, cells, errors, braid=True):
        self.cells = cells
        self.errors = errors
        self.braid = braid
        self.lines = []
        self.failed = self.not_run = 0

    def get(self, config, tool, nbytes):
        return self.cells.get((config, tool, nbytes))

    def skipped(self, config, text):
        """True (and a NOT RUN line) when no tool ran `config` (ONLY=...) or
        braid was left out on purpose."""
        ran = any(c == config for (c, t, s) in self.cells) or any(
            c == config for (c, t) in self.errors)
        if ran and self.braid:
            return False
        self.not_run += 1
        self.lines.append("NOT RUN  %s%s" % (text, "" if self.braid else " (braid left out)"))
        return True

    def add(self, verdict, text):
        assert verdict in ("PASS", "FAIL")
        if verdict == "FAIL":
            self.failed += 1
        self.lines.append("%s  %s" % (verdict, text))

    def braid_missing(self, config, text):
        """FAIL line for a target braid has no result for, with why."""
        why = self.errors.get((config, "braid"))
        self.add("FAIL", text + (" (braid failed: %s)" % why[0] if why else " (no braid result)"))

    def aside(self, config, nbytes, braid, what):
        """'(vs MPI* x.xx)': the same comparison against the malloc-tuned run."""
        k = self.get(config, "mpi_keepmem", nbytes)
        if k is None or braid is None:
            return ""
        if what == "time":
            return "; MPI* %.2f µs" % k.time_us
        return "; MPI* %.2f GB/s, braid/MPI* %.2f×" % (k.busbw, braid.busbw / k.busbw if k.busbw else 0)

    def busbw_ratio(self, config, nbytes, factor, name):
        b, m = self.get(config, "braid", nbytes), self.get(config, "mpi", nbytes)
        want = "≥ %.1f× Open MPI" % factor if factor != 1 else "≥ Open MPI"
        text = "%s: busbw at %s %s" % (name, human(nbytes), want)
        if self.skipped(config, text):
            return None
        if m is None:
            return self.add("FAIL", text + " (no Open MPI result)")
        if b is None:
            return self.braid_missing(config, text + "; MPI %.2f GB/s" % m.busbw)
        ok = b.busbw >= factor * m.busbw and b.wrong == 0
        self.add("PASS" if ok else "FAIL",
                 text + " — braid %.2f, MPI %.2f GB/s, %.2f×%s%s" % (
                     b.busbw, m.busbw, b.busbw / m.busbw if m.busbw else 0,
                     " (braid WRONG results)" if b.wrong else "",
                     self.aside(config, nbytes, b, "bw")))

    def run(self):
        # 1. two ranks, shared memory, all_reduce.
        for size in (16 * MiB, 64 * MiB):
            self.busbw_ratio("ar2_shm", size, 1.5, "all_reduce 2 ranks shm")
        b, m = self.get("ar2_shm", "braid", 8), self.get("ar2_shm", "mpi", 8)
        text = "all_reduce 2 ranks shm: time at 8 B ≤ Open MPI"
        if self.skipped("ar2_shm", text):
            pass
        elif m is None:
            self.add("FAIL", text + " (no Open MPI result)")
        elif b is None:
            self.braid_missing("ar2_shm", text + "; MPI %.2f µs" % m.time_us)
        else:
            self.add("PASS" if b.time_us <= m.time_us and b.wrong == 0 else "FAIL",
                     text + " — braid %.2f µs, MPI %.2f µs%s" % (
                         b.time_us, m.time_us, self.aside("ar2_shm", 8, b, "time")))
        # 2. two ranks over TCP loopback.
        self.busbw_ratio("ar2_tcp", 64 * MiB, 1.0, "all_reduce 2 ranks TCP")
        # 3. oversubscribed: braid at n ranks ≥ half of braid at 2 ranks.
        two = self.get("ar2_shm", "braid", 16 * MiB)
        for config, n in (("ar4_over", 4), ("ar8_over", 8)):
            b, m = self.get(config, "braid", 16 * MiB), self.get(config, "mpi", 16 * MiB)
            text = "all_reduce %d ranks oversubscribed: busbw at 16 MiB ≥ ½ × braid's 2-rank" % n
            mpi = " (MPI %.2f GB/s)" % m.busbw if m else " (no MPI result)"
            if self.skipped(config, text) or (two is None and self.skipped("ar2_shm", text)):
                continue
            if b is None or two is None:
                self.braid_missing(config if b is None else "ar2_shm", text + mpi)
            else:
                ok = b.busbw >= 0.5 * two.busbw and b.wrong == 0
                self.add("PASS" if ok else "FAIL", text + " — braid %.2f vs ½ × %.2f = %.2f GB/s%s" % (
                    b.busbw, two.busbw, 0.5 * two.busbw, mpi))
        # 4. the other collectives, two ranks, every size ≥ 1 MiB.
        for config in ("ag2_shm", "rs2_shm", "bc2_shm", "a2a2_shm"):
            op = CONFIGS[config][2]
            sizes = sorted({s for (c, t, s) in self.cells if c == config and s >= MiB})
            text = "%s 2 ranks shm: busbw ≥ Open MPI at every size ≥ 1 MiB" % op
            if self.skipped(config, text):
                continue
            if not sizes:
                self.add("FAIL", text + " (no results)")
                continue
            pairs = [(s, self.get(config, "braid", s), self.get(config, "mpi", s)) for s in sizes]
            if any(m is None for _, _, m in pairs):
                self.add("FAIL", text + " (missing Open MPI results)")
                continue
            if any(b is None for _, b, _ in pairs):
                self.braid_missing(config, text)
                continue
            worst = min(pairs, key=lambda p: p[1].busbw / p[2].busbw if p[2].busbw else 1e9)
            s, b, m = worst
            ok = all(b.busbw >= m.busbw and b.wrong == 0 for _, b, m in pairs)
            slow = [human(s) for s, b, m in pairs if b.busbw < m.busbw]
            self.add("PASS" if ok else "FAIL", text + " — worst %s: braid %.2f, MPI %.2f GB/s (%.2f×)%s" % (
                human(s), b.busbw, m.busbw, b.busbw / m.busbw if m.busbw else 0,
                "; slower at " + ", ".join(slow) if slow else ""))
        # Any wrong element anywhere is a failure of its own.
        bad = sorted({(c, t) for (c, t, s), cell in self.cells.items() if cell.wrong})
        for c, t in bad:
            self.add("FAIL", "%s: %s returned wrong elements" % (c, label(t)))
        # A braid run that crashed or timed out fails even when other rounds
        # of the same configuration gave the numbers the targets use.
        if self.braid:
            for (c, t), msgs in sorted(self.errors.items()):
                if t == "braid":
                    self.add("FAIL", "%s: braid failed in %d run(s): %s" % (c, len(msgs), msgs[0]))


def machine():
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    try:
        ver = subprocess.run(["mpirun", "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        ver = "Open MPI: not found"
    return model, cores, ver


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--md", help="also write the report to this file")
    ap.add_argument("--command", default="bench/compare_mpi.sh")
    ap.add_argument("--notes", help="a markdown file to put after the header")
    ap.add_argument("--rounds", default="?")
    ap.add_argument("--no-braid", action="store_true",
                    help="braid was left out on purpose (BRAID=0): its targets are NOT RUN")
    a = ap.parse_args()

    cells, errors, nruns, nbusy = load(a.results)
    model, cores, ver = machine()
    out = ["# braid vs Open MPI — collectives", ""]
    out.append("- command: `%s`" % a.command)
    out.append("- date: %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"))
    out.append("- machine: %s cores, %s (Debian 12); %s" % (cores, model, ver))
    out.append("- every number is the median of %s alternating rounds (braid, MPI, MPI* "
               "one after another in each round)" % a.rounds)
    out.append("- columns: **braid** = `braid bench --json` (`--transport tcp` for TCP); "
               "**MPI** = Open MPI defaults, `mpirun -n N --bind-to none` (+ `--oversubscribe` "
               "above the core count; `--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo` "
               "for TCP) running bench/mpi_bench.c; **MPI*** = the same with glibc keeping freed "
               "memory (`-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=17179869184`): first touch "
               "of a page costs ~11 µs on this VM and Open MPI mallocs/frees temporaries per call, "
               "so MPI* is Open MPI at its best here. Targets are judged against MPI (defaults); "
               "the MPI* ratio is shown beside them.")
    out.append("- busbw as nccl-tests: all_reduce × 2(n−1)/n; all_gather, reduce_scatter, "
               "all_to_all × (n−1)/n; broadcast × 1. time = slowest rank's average per call.")
    if nbusy:
        out.append("- **%d of %d runs started while other work kept ≥ 25%% of the CPUs busy**; "
                   "their numbers are low (the medians damp this only when it is one round "
                   "in three)." % (nbusy, nruns))
    out.append("")
    if a.notes:
        with open(a.notes) as f:
            out += f.read().rstrip("\n").splitlines() + [""]
    tools = {t for (c, t, s) in cells}
    for config, (title, n, op, transport) in CONFIGS.items():
        if not any(c == config for (c, t, s) in cells) and not any(
                c == config for (c, t) in errors):
            continue
        out += ["## %s" % title, ""]
        out += table(cells, config, tools | {"braid", "mpi"})
        for (c, t), msgs in sorted(errors.items()):
            if c == config:
                out.append("")
                out.append("%s failed in %d run(s): %s" % (label(t), len(msgs), msgs[0]))
        out.append("")
    tg = Targets(cells, errors, braid=not a.no_braid)
    tg.run()
    out += ["## Targets (braid vs Open MPI defaults)", "", "```"] + tg.lines + ["```", ""]
    out.append("%d target line(s) failed, %d not run." % (tg.failed, tg.not_run))
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)
    return 1 if tg.failed else 0


if __name__ == "__main__":
    sys.exit(main())
