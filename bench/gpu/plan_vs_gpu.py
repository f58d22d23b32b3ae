#!/usr/bin/env python3
"""Set gpt_step.py's measured one-GPU steps beside `braid plan`'s prediction.

For each line of gpt_step.py's output, asks `braid plan --cluster CLUSTER
--gpus 1` for the same model, batch, micro-batch and recomputation (tp, pp,
dp 1, ZeRO 0) and prints a Markdown table: step, its forward+backward part
against the plan's compute term, the optimizer against the plan's optimizer
term, and peak memory (torch.cuda.max_memory_allocated) against
memory_bytes_per_device. Runs here, without a GPU.

  python3 bench/gpu/plan_vs_gpu.py [--braid build/braid] [--cluster dgx-h100] OUT.jsonl...
"""
import argparse, json, subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--braid", default="build/braid")
ap.add_argument("--cluster", default="dgx-h100")
ap.add_argument("files", nargs="+")
a = ap.parse_args()

print("| model | mbs | recompute | kernels | dropout | step: plan / measured | fwd+bwd: plan compute / measured "
      "| optimizer: plan / measured | memory: plan / measured peak |")
print("|---|---|---|---|---|---|---|---|---|")
for f in a.files:
    for line in open(f):
        r = json.loads(line)
        if "step_s" not in r:
            continue
        model = "gpt:layers={layers},hidden={hidden},heads={heads},seq={seq},vocab={vocab}".format(**r)
        out = subprocess.run([a.braid, "plan", "--model", model, "--cluster", a.cluster, "--gpus", "1",
                              "--batch", str(r["batch"]), "--mbs", str(r["mbs"]), "--tp", "1", "--pp", "1",
                              "--dp", "1", "--zero", "0", "--recompute", r["recompute"], "--top", "1",
                              "--json"], capture_output=True, text=True, check=True).stdout
        p = json.loads(out.splitlines()[0])
        opt = r["step_s"] - r["fwd_bwd_s"]
        mem = p["memory_bytes_per_device"]
        print("| {} | {} | {} | {} | {:g} | {:.3f} / {:.3f} s = {:.2f} | {:.3f} / {:.3f} s = {:.2f} "
              "| {:.3f} / {:.3f} s | {:.1f} / {:.1f} GiB = {:.2f} |".format(
                  r["name"], r["mbs"], r["recompute"], "fused" if r.get("fused") else "eager",
                  r.get("dropout", 0.1), p["step_s"], r["step_s"], p["step_s"] / r["step_s"],
                  p["compute_s"], r["fwd_bwd_s"], p["compute_s"] / r["fwd_bwd_s"], p["optimizer_s"], opt,
                  mem / 2**30, r["peak_allocated"] / 2**30, mem / r["peak_allocated"]))
