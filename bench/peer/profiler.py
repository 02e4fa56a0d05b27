# Peer for bench_profiler: the same MLP step in PyTorch, in blocks with
# torch.profiler off and on (CPU activity, shapes and memory recorded, as
# oar's profiler does), alternating; median per-step time of each. The time
# is taken inside the profiling context, so the trace processing at its exit
# is not counted (oar's figure leaves out writing the trace too).
import statistics
import time
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

torch.set_num_threads(1)
torch.manual_seed(0)
w = [(torch.randn(784, 512) * 0.05).requires_grad_(), (torch.randn(512, 512) * 0.05).requires_grad_(),
     (torch.randn(512, 10) * 0.05).requires_grad_()]
b = [(torch.randn(n) * 0.05).requires_grad_() for n in (512, 512, 10)]
x = torch.randn(128, 784)
y = torch.randint(0, 10, (128,))


def step():
    h = x
    for l in range(3):
        h = h @ w[l] + b[l]
        if l < 2:
            h = torch.relu(h)
    loss = F.cross_entropy(h, y)
    loss.backward()
    with torch.no_grad():
        for p in w + b:
            p -= 0.01 * p.grad
            p.grad = None


def block(n):
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n


block(5)
off, on = [], []
for r in range(8):
    off.append(block(10))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True):
        on.append(block(10))
moff, mon = statistics.median(off), statistics.median(on)
print(f"torch mlp_step_profiler_off {moff * 1e3:.3f} ms")
print(f"torch mlp_step_profiler_on {mon * 1e3:.3f} ms")
print(f"torch profiler_on_overhead {mon / moff:.3f} x")
