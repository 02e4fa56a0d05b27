# Peer of bench/bench_predictor.c: the same LeNet-5 and MLP traced with
# torch.jit.trace (frozen, eval), median latency at batch 1 and time per
# image at batch 64, on 2 threads as oar runs.
import time
import torch

torch.set_num_threads(2)
torch.manual_seed(0)
nn = torch.nn
lenet = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                    nn.Linear(512, 10))

for name, m in (("lenet", lenet), ("mlp", mlp)):
    m.eval()
    x1 = torch.randn(1, 1, 28, 28)
    x64 = torch.randn(64, 1, 28, 28)
    with torch.no_grad():
        ts = torch.jit.freeze(torch.jit.trace(m, x1))
        for _ in range(50):
            ts(x1)
        t = []
        for _ in range(400):
            t0 = time.perf_counter()
            ts(x1)
            t.append(time.perf_counter() - t0)
        t.sort()
        print(f"torch {name}_latency_b1 {t[len(t) // 2] * 1e6:.1f} us")
        for _ in range(10):
            ts(x64)
        t0 = time.perf_counter()
        for _ in range(100):
            ts(x64)
        per = (time.perf_counter() - t0) / 100
        print(f"torch {name}_b64_per_image {per / 64 * 1e6:.2f} us")
