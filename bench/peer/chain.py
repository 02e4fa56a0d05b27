# Peer for bench_chain: 1000 tiny ops (mul, add, sin in turn on 4-element
# float32 tensors), then backward to the leaf; best of 6 timed rounds.
import time
import torch

torch.set_num_threads(1)
LEN = 1000
x = torch.tensor([0.1, 0.2, 0.3, 0.4], requires_grad=True)
c = torch.tensor([0.9, 0.8, 0.7, 0.6])


def chain():
    h = x
    for i in range(LEN):
        r = i % 3
        if r == 0:
            h = h * c
        elif r == 1:
            h = h + c
        else:
            h = torch.sin(h)
    h.sum().backward()
    x.grad = None


best = 1e30
for rep in range(7):
    n = 50
    t0 = time.perf_counter()
    for _ in range(n):
        chain()
    us = (time.perf_counter() - t0) * 1e6 / n
    if rep > 0:
        best = min(best, us)
print(f"torch chain1000_fwd_bwd {best:.1f} us")
print(f"torch chain_per_op {best * 1e3 / LEN:.1f} ns")
