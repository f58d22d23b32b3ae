#!/usr/bin/env python3
"""The simulator beside the closed forms (docs/PLAN.md, "The simulator").

Runs `braid plan --simulate-collective ... --json` for ring, hd and hier
all_reduce from 8 to 4096 ranks on three networks and prints a Markdown
table of simulated time, closed form and their ratio:
  flat       dgx-h100's links, one device per host, non-blocking spine
             (every message one inter-host hop: the flat formulas' network)
  dgx-h100   the preset (8 GPUs on NVSwitch and 8 NICs a host, a
             non-blocking spine)
Usage: bench/plan_sim_table.py [path/to/braid] [--ring-max N]
"""
import json
import os
import subprocess
import sys
import tempfile
import time

braid = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "build/braid"
ring_max = 1024  # ring at 4096 ranks: 33.5 M messages, ~8 GB and minutes
if "--ring-max" in sys.argv:
    ring_max = int(sys.argv[sys.argv.index("--ring-max") + 1])


def cluster_file(d, name, edit):
    c = json.loads(subprocess.check_output([braid, "plan", "--show-cluster", "--cluster", "dgx-h100"]))
    edit(c)
    c["name"] = name
    path = os.path.join(d, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def flat(c):
    c.update(devices_per_host=1, nics_per_host=1, hosts_per_rack=65536, spine_oversubscription=1)


with tempfile.TemporaryDirectory() as d:
    nets = [("flat", cluster_file(d, "flat", flat)), ("dgx-h100", "dgx-h100")]
    print("| network | algorithm | ranks | bytes | simulated | closed form | sim / closed | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for net, cluster in nets:
        for algo in ("ring", "hd", "hier"):
            if algo == "hier" and net == "flat":
                continue  # one device a host: no hierarchy
            for ranks in (8, 64, 512, 1024, 4096):
                if algo == "hier" and ranks <= 8:
                    continue
                if (algo == "ring" and ranks > ring_max) or (algo != "ring" and ranks == 1024):
                    continue
                # 64 KiB a rank for ring and hd (one chunk a step); 64 MiB for hier.
                size = 64 << 20 if algo == "hier" else ranks * (64 << 10)
                t0 = time.time()
                out = subprocess.run([braid, "plan", "--simulate-collective", "all_reduce", "--algo", algo,
                                      "--ranks", str(ranks), "--bytes", str(size), "--cluster", cluster,
                                      "--json"], capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"| {net} | {algo} | {ranks} | {size} | error: {out.stderr.strip()} | | | |")
                    continue
                r = json.loads(out.stdout)
                print(f"| {net} | {algo} | {ranks} | {size >> 10} KiB | {r['simulated_s'] * 1e3:.4g} ms | "
                      f"{r['closed_form_s'] * 1e3:.4g} ms | {r['ratio']:.3f} | {time.time() - t0:.1f} s |")
