# Peer for bench_ops: the same ops and sizes in PyTorch (CPU), best of 5.
import os
import time
import torch
import torch.nn.functional as F

# OAR_BENCH_CPUTIME=1: process CPU time, one thread (as bench_ops.c)
cputime = os.environ.get("OAR_BENCH_CPUTIME") == "1"
clock = time.process_time if cputime else time.perf_counter
torch.set_num_threads(1 if cputime else 2)
torch.manual_seed(0)
a = torch.randn(512, 128); b = torch.randn(512, 128); r = torch.randn(128)
att = torch.randn(32, 64, 64); w = torch.ones(128); bias = torch.zeros(128)
x1 = torch.randn(64, 1, 28, 28); w1 = torch.randn(6, 1, 5, 5); b1 = torch.randn(6)
x2 = torch.randn(64, 6, 12, 12); w2 = torch.randn(16, 6, 5, 5); b2 = torch.randn(16)
pin = torch.randn(64, 6, 24, 24); logits = torch.randn(8, 32000)

def bench(name, fn, iters):
    best = 1e30
    with torch.no_grad():
        for _ in range(5):
            t0 = clock()
            for _ in range(iters):
                fn()
            best = min(best, (clock() - t0) * 1e6 / iters)
    print(f"torch {name} {best:.2f} us")

bench("add_512x128", lambda: torch.add(a, b), 2000)
bench("mul_bcast_512x128", lambda: torch.mul(a, r), 2000)
bench("exp_512x128", lambda: torch.exp(a), 2000)
bench("gelu_512x128", lambda: F.gelu(a), 1000)
bench("sum_last_512x128", lambda: a.sum(-1), 2000)
bench("sum_first_512x128", lambda: a.sum(0), 2000)
bench("mean_last_512x128", lambda: a.mean(-1), 2000)
bench("amax_last_512x128", lambda: a.amax(-1), 2000)
bench("softmax_32x64x64", lambda: torch.softmax(att, -1), 1000)
bench("layer_norm_512x128", lambda: F.layer_norm(a, (128,), w, bias, 1e-5), 1000)
bench("conv2d_lenet1", lambda: F.conv2d(x1, w1, b1), 100)
bench("conv2d_lenet2", lambda: F.conv2d(x2, w2, b2), 100)
bench("max_pool2d_lenet", lambda: F.max_pool2d(pin, 2), 200)
bench("topk_8x32000_k50", lambda: torch.topk(logits, 50, -1), 100)
bench("topk_512x128_k16", lambda: torch.topk(a, 16, -1), 200)
