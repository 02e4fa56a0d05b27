# Peer for bench_fft: the same transforms and sizes in PyTorch (CPU), the
# fastest single call of 5 x iters, as bench_fft measures.
import os
import time
import torch

# OAR_BENCH_CPU_TIME=1: CPU time of one thread (as bench_fft.c says)
cpu_time = os.environ.get("OAR_BENCH_CPU_TIME", "0") not in ("", "0")
clock = time.process_time if cpu_time else time.perf_counter
torch.set_num_threads(1 if cpu_time else 2)
torch.manual_seed(0)
xc = torch.randn(4096, 256).to(torch.complex64)
xr = torch.randn(16, 256, 256)
gc = torch.randn(4096, 256).to(torch.complex64)
gr = torch.randn(16, 256, 129).to(torch.complex64)


def bench(name, fn, iters):
    best = 1e30
    for _ in range(5):
        for _ in range(iters):
            t0 = clock()
            fn()
            best = min(best, (clock() - t0) * 1e6)
    print(f"torch {name} {best:.2f} us")


with torch.no_grad():
    bench("fft_c64_4096x256", lambda: torch.fft.fft(xc), 20)
    bench("rfft2_f32_16x256x256", lambda: torch.fft.rfft2(xr), 20)
xc.requires_grad_(True)
xr.requires_grad_(True)
bench("fft_c64_4096x256_fwd_bwd", lambda: torch.autograd.grad(torch.fft.fft(xc), xc, gc), 10)
bench("rfft2_f32_16x256x256_fwd_bwd", lambda: torch.autograd.grad(torch.fft.rfft2(xr), xr, gr), 10)
