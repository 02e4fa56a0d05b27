# Peer of bench_bf16 (which runs it): torch.matmul on f32 and bf16 CPU
# tensors of [n, n] x [n, n], GFLOP/s, then F.conv2d on bench_bf16.c's
# conv layers (the same list), ms; best of `reps` after one warm-up.
# Usage: bf16_matmul.py THREADS REPS N
import sys
import time
import torch
import torch.nn.functional as F

# N, C, H (= W), O, kernel, stride, padding: as `convs` in bench/bench_bf16.c
CONVS = [(8, 64, 56, 64, 3, 1, 1), (8, 256, 28, 128, 1, 1, 0), (8, 128, 28, 256, 3, 2, 1),
         (8, 3, 112, 64, 7, 2, 3)]

threads, reps, n = (int(v) for v in sys.argv[1:4])
torch.set_num_threads(threads)
torch.manual_seed(1)
a = torch.randn(n, n)
b = torch.randn(n, n)
flop = 2.0 * n * n * n
with torch.no_grad():
    for name, (x, y) in (("f32", (a, b)), ("bf16", (a.bfloat16(), b.bfloat16()))):
        best = 1e30
        for r in range(reps + 1):  # r == 0 warms up
            t0 = time.perf_counter()
            torch.matmul(x, y)
            t = time.perf_counter() - t0
            if r > 0:
                best = min(best, t)
        print(f"torch {name} {flop / best * 1e-9:.1f} GFLOP/s")
    for i, (n_, c, h, o, k, st, p) in enumerate(CONVS):
        x = torch.randn(n_, c, h, h)
        w = torch.randn(o, c, k, k)
        for name, (xx, ww) in (("f32", (x, w)), ("bf16", (x.bfloat16(), w.bfloat16()))):
            best = 1e30
            for r in range(reps + 1):
                t0 = time.perf_counter()
                F.conv2d(xx, ww, stride=st, padding=p)
                t = time.perf_counter() - t0
                if r > 0:
                    best = min(best, t)
            print(f"torch conv{i}_{name} {best * 1e3:.3f} ms")
