#!/usr/bin/python3
"""Checks that braid and PyTorch computed the same numbers: the losses of
the first N steps, from the same initial weights and data order.

    same_losses.py BRAID_LOG TORCH_LOG [--n 3] [--rtol 1e-4] [--what LABEL]

Each log is JSON lines: step records with "loss" (braid train --json-log,
bench/torch_train.py), or a done record whose "first_losses" lists them
(bench/torch_ddp.py). Prints the two lists, "a b c / a b c". Exit status 1
(with a line on stderr) when a pair differs by more than rtol relative to
PyTorch's value, or when a log has fewer than N losses.

Both sides run the same float32 arithmetic in different orders, so the
first losses agree to about 1e-6 relative; 1e-4 leaves room for that and
still catches a different model, data order, initial weights or update.
"""
import argparse
import json
import sys


def first_losses(path, n):
    steps, done = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "loss" in r and "step" in r:
                steps.append(r["loss"])
            elif r.get("event") == "done":
                done = r
    if not steps and done is not None:
        steps = list(done.get("first_losses", []))
    return steps[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("braid")
    ap.add_argument("torch")
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--what", default="")
    a = ap.parse_args()
    b, t = first_losses(a.braid, a.n), first_losses(a.torch, a.n)
    show = lambda v: " ".join("%.5f" % x for x in v) or "none"
    print("%s / %s" % (show(b), show(t)))
    bad = len(b) < a.n or len(t) < a.n or any(
        abs(x - y) > a.rtol * abs(y) for x, y in zip(b, t))
    if bad:
        print("same_losses.py: %s: the first %d losses differ beyond %g relative: braid %s, "
              "PyTorch %s" % (a.what, a.n, a.rtol, show(b), show(t)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
