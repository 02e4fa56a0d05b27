"""The demo CNN (examples/fashion_mnist.c) in PyTorch, for bench/amp.sh:
the same model, Adam (lr 2e-3) with cosine decay, batch 64, the same
normalisation, trained for OAR_DEMO_EPOCHS (1) epochs on the first
OAR_DEMO_LIMIT (all) images, in f32 or with the forward pass under
torch.autocast("cpu", torch.bfloat16) (argv[1] = f32 | bf16). Prints
"torch cnn <mode> ms/step <x> test_accuracy <y>"."""
import gzip, math, os, sys, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530
DATA = os.environ.get("OAR_DEMO_DATA", "/usr/share/datasets/fashion-mnist")


def load(kind):
    with gzip.open(f"{DATA}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DATA}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


def model(c=16):
    return nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1, bias=False), nn.BatchNorm2d(2 * c), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * c * 49, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "f32"
    epochs = int(os.environ.get("OAR_DEMO_EPOCHS", "1"))
    limit = int(os.environ.get("OAR_DEMO_LIMIT", "0"))
    torch.set_num_threads(int(os.environ.get("OAR_PEER_THREADS", "2")))
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    if limit:
        xtr, ytr, xte, yte = xtr[:limit], ytr[:limit], xte[:limit], yte[:limit]
    torch.manual_seed(0)
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=2e-3)
    steps = epochs * math.ceil(len(xtr) / 64)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    cast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16")
    g = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(len(xtr), generator=g)
        for i in range(0, len(xtr), 64):
            idx = perm[i:i + 64]
            with cast():
                logits = m(xtr[idx])
            loss = F.cross_entropy(logits.float(), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    ms = (time.perf_counter() - t0) / steps * 1e3
    m.eval()
    correct = 0
    with torch.no_grad(), cast():
        for i in range(0, len(xte), 500):
            correct += (m(xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum().item()
    print(f"torch cnn {mode} ms/step {ms:.2f} test_accuracy {correct / len(xte):.4f}")


if __name__ == "__main__":
    main()
