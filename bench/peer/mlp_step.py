# Peer for bench_mlp_step: the same MLP step in PyTorch, with its minor page
# faults per step. "mlp_step": torch.set_num_threads(1), which also holds
# OpenBLAS (OpenMP build, libgomp shared with torch) to one thread;
# "mlp_step_2t": set_num_threads(2). bench_mlp_step prints the same two.
import resource
import time
import torch
import torch.nn.functional as F

torch.manual_seed(0)
w = [(torch.randn(784, 512) * 0.05).requires_grad_(), (torch.randn(512, 512) * 0.05).requires_grad_(),
     (torch.randn(512, 10) * 0.05).requires_grad_()]
b = [(torch.randn(n) * 0.05).requires_grad_() for n in (512, 512, 10)]
x = torch.randn(128, 784)
y = torch.randint(0, 10, (128,))


def run(name, warm, steps, counts):
    for s in range(warm + steps):
        if s == warm:
            t0 = time.perf_counter()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        h = x
        for l in range(3):
            h = h @ w[l] + b[l]
            if l < 2:
                h = torch.relu(h)
        loss = F.cross_entropy(h, y)
        loss.backward()
        with torch.no_grad():
            for p in w + b:
                p.add_(p.grad, alpha=-0.01)
                p.grad = None
    ms = (time.perf_counter() - t0) * 1e3 / steps
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    print(f"torch {name} {ms:.3f} ms")
    if counts:
        print(f"torch mlp_minor_faults_per_step {faults / steps:.2f} faults")


torch.set_num_threads(1)
run("mlp_step", 5, 50, True)
torch.set_num_threads(2)
run("mlp_step_2t", 5, 50, False)
