#!/usr/bin/env python3
"""The GEMM rate of one GPU by size and dtype, and its memory bandwidth.

What the planner's device presets take their efficiency curve from:
rate(size) / peak is how far a matrix product of that
size falls short of the spec sheet. Runs cuBLAS through PyTorch (the
library users train with). Each point: 3 warm-up products, then 20
products captured in a CUDA graph, replayed until 50 ms have passed (at
least 3 replays), timed with CUDA events; the median of 5 such batches,
in TFLOP/s (2·M·N·K per product). Random normal data (zeros run faster
on Hopper and would flatter the rate). Needs a GPU and PyTorch; make
test and make bench never run it.

  python3 bench/gpu/gemm_curve.py OUT.json
"""
import json, statistics, sys, time
import torch

def rate(m, n, k, dtype, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize()
    # 20 products captured in a CUDA graph: one launch replays them, so
    # small sizes time the kernels, not Python's launches.
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20):
            c = a @ b
    g.replay(); torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); g.replay(); end.record(); torch.cuda.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = max(3, int(0.05 / one))
    out = []
    for _ in range(5):
        start.record()
        for _ in range(reps):
            g.replay()
        end.record(); torch.cuda.synchronize()
        out.append(2.0 * m * n * k * 20 * reps / (start.elapsed_time(end) / 1e3) / 1e12)
    del g
    del a, b, c
    return statistics.median(out)

def copy_bandwidth(nbytes=1 << 30):
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(5):
        start.record()
        for _ in range(10):
            y.copy_(x)
        end.record(); torch.cuda.synchronize()
        out.append(2.0 * nbytes * 10 / (start.elapsed_time(end) / 1e3) / 1e12)  # read + write
    return statistics.median(out)

def main():
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    res = {"device": props.name, "sms": props.multi_processor_count,
           "memory_bytes": props.total_memory, "torch": torch.__version__,
           "cuda": torch.version.cuda, "unit": "TFLOP/s", "square": {}, "gpt": {}}
    kinds = [("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
             ("tf32", torch.float32, True), ("fp32", torch.float32, False)]
    for name, dt, tf32 in kinds:
        row = {}
        for s in [256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384]:
            if name == "fp32" and s > 8192:
                continue
            row[str(s)] = round(rate(s, s, s, dt, tf32), 1)
        res["square"][name] = row
        print(name, row, flush=True)
    # A GPT layer's products at 8192 tokens (M), hidden h: QKV (h→3h),
    # the attention output (h→h), MLP up (h→4h) and down (4h→h).
    for h in [1024, 2048, 4096, 8192, 12288]:
        row = {}
        for label, k, n in [("qkv", h, 3 * h), ("proj", h, h), ("up", h, 4 * h), ("down", 4 * h, h)]:
            row[label] = round(rate(8192, n, k, torch.bfloat16), 1)
        res["gpt"][str(h)] = row
        print("gpt bf16 h", h, row, flush=True)
    res["copy_TBps"] = round(copy_bandwidth(), 2)
    res["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(res, indent=1))
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)

if __name__ == "__main__":
    main()
