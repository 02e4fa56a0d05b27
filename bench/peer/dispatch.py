# Peer for bench_dispatch: torch.add on 1-element float32 tensors.
import time
import torch

torch.set_num_threads(1)
a = torch.ones(1)
b = torch.ones(1)
best = 1e30
for rep in range(5):
    t0 = time.perf_counter()
    for _ in range(200000):
        torch.add(a, b)
    ns = (time.perf_counter() - t0) * 1e9 / 200000
    best = min(best, ns)
print(f"torch dispatch_add_1elem {best:.1f} ns")
