# Peer for bench_conv: the same convs and max_pool in PyTorch (CPU), median
# of the repetitions after a warm-up; argv[1] the ResNet-18 batch (default 1),
# argv[2] a name filter. OAR_BENCH_CPUTIME=1: process CPU time, one thread.
import os
import sys
import time
import torch
import torch.nn.functional as F

cputime = os.environ.get("OAR_BENCH_CPUTIME") == "1"
clock = time.process_time if cputime else time.perf_counter
torch.set_num_threads(1 if cputime else 2)
torch.manual_seed(1)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1
only = sys.argv[2] if len(sys.argv) > 2 else None

# name, n, c, h, w, o, k, stride, pad, times, pool (as bench_conv.c)
cases = [
    ("lenet_conv1", 64, 1, 28, 28, 6, 5, 1, 0, 0, 0),
    ("lenet_conv2", 64, 6, 12, 12, 16, 5, 1, 0, 0, 0),
    ("conv3x3_16x64x32x32", 16, 64, 32, 32, 64, 3, 1, 1, 0, 0),
    ("r18_stem_7x7s2", N, 3, 224, 224, 64, 7, 2, 3, 1, 0),
    ("r18_maxpool_3x3s2", N, 64, 112, 112, 64, 3, 2, 1, 1, 1),
    ("r18_l1_3x3", N, 64, 56, 56, 64, 3, 1, 1, 4, 0),
    ("r18_l2_3x3s2", N, 64, 56, 56, 128, 3, 2, 1, 1, 0),
    ("r18_l2_1x1s2", N, 64, 56, 56, 128, 1, 2, 0, 1, 0),
    ("r18_l2_3x3", N, 128, 28, 28, 128, 3, 1, 1, 3, 0),
    ("r18_l3_3x3s2", N, 128, 28, 28, 256, 3, 2, 1, 1, 0),
    ("r18_l3_1x1s2", N, 128, 28, 28, 256, 1, 2, 0, 1, 0),
    ("r18_l3_3x3", N, 256, 14, 14, 256, 3, 1, 1, 3, 0),
    ("r18_l4_3x3s2", N, 256, 14, 14, 512, 3, 2, 1, 1, 0),
    ("r18_l4_1x1s2", N, 256, 14, 14, 512, 1, 2, 0, 1, 0),
    ("r18_l4_3x3", N, 512, 7, 7, 512, 3, 1, 1, 3, 0),
]

total, everything = 0.0, True
with torch.no_grad():
    for name, n, c, h, w, o, k, s, p, times, pool in cases:
        if only and only not in name:
            everything = False
            continue
        x = torch.randn(n, c, h, w)
        wt = torch.randn(o, c, k, k)
        b = torch.randn(o)
        fn = (lambda: F.max_pool2d(x, k, s, p)) if pool else (lambda: F.conv2d(x, wt, b, s, p))
        oh = (h + 2 * p - k) // s + 1
        macs = n * o * oh * oh * c * k * k
        reps = 5 if macs * n > 2e9 else 15
        fn()
        ts = []
        for _ in range(reps):
            t0 = clock()
            fn()
            ts.append(clock() - t0)
        t = sorted(ts)[reps // 2]
        print(f"torch {name} {t * 1e3:.3f} ms")
        total += t * times
if everything:
    print(f"torch r18_convs_and_pool_b{N} {total * 1e3:.3f} ms")
