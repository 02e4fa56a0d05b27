#!/usr/bin/python3
"""The PyTorch twin of examples/vit.c: the same small Vision Transformer on
Fashion-MNIST (16 patches of 7 x 7 by reshape and permute, a Linear patch
embedding to d 64, a class token and learned position embeddings drawn
N(0, 0.02^2), 4 pre-norm encoder layers with 4 heads, feed-forward 128,
GELU, no dropout, a final LayerNorm and a Linear head on the class token),
PyTorch's default initialisation elsewhere, the same batches in the same
order (splitmix64 from seed 1234, drawn with replacement), the same AdamW
schedule (lr 2e-3, weight decay 0.05, linear warm-up over 5% of the steps,
cosine decay to a tenth), gradient clipping at 1. Prints the test accuracy.

    /usr/bin/python3 examples/ref/vit.py

Environment as for the C example: OAR_EXAMPLE_STEPS (1500), OAR_EXAMPLE_BATCH
(128), OAR_EXAMPLE_TEST (test images scored, 10000), OAR_EXAMPLE_DATA
(default /usr/share/datasets/fashion-mnist), OAR_EXAMPLE_THREADS (torch
threads, 1)."""
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1
IMG, PATCH, D, HEADS, LAYERS, FF, CLASSES = 28, 7, 64, 4, 4, 128, 10
GRID = IMG // PATCH
NPATCH = GRID * GRID
MEAN, STD = 0.2860, 0.3530


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def env(name, default):
    v = os.environ.get(name)
    return type(default)(v) if v else default


def load(folder, prefix):
    """Images [N, 1, 28, 28] normalized as the C example does, labels [N]."""
    with gzip.open(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz")) as f:
        pix = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, IMG, IMG)
    with gzip.open(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)
    x = ((pix.astype(np.float64) / 255.0 - MEAN) / STD).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(lab.astype(np.int64))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D).normal_(0, 0.02))
        self.pos_embed = nn.Parameter(torch.zeros(1, NPATCH + 1, D).normal_(0, 0.02))
        self.patch_embed = nn.Linear(PATCH * PATCH, D)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        B = x.shape[0]
        patches = x.reshape(B, GRID, PATCH, GRID, PATCH).permute(0, 1, 3, 2, 4)
        tokens = self.patch_embed(patches.reshape(B, NPATCH, PATCH * PATCH))
        seq = torch.cat([self.cls_token.expand(B, 1, D), tokens], 1) + self.pos_embed
        for layer in self.layers:
            seq = layer(seq)
        return self.head(self.norm(seq)[:, 0])


def lr_at(step, steps, lr_max):
    warm = max(1, steps // 20)
    if step < warm:
        return lr_max * (step + 1) / warm
    lo = lr_max / 10
    return lo + 0.5 * (lr_max - lo) * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def main():
    steps, batch = env("OAR_EXAMPLE_STEPS", 1500), env("OAR_EXAMPLE_BATCH", 128)
    n_test = env("OAR_EXAMPLE_TEST", 10000)
    folder = env("OAR_EXAMPLE_DATA", "/usr/share/datasets/fashion-mnist")
    torch.set_num_threads(env("OAR_EXAMPLE_THREADS", 1))
    xtr, ytr = load(folder, "train")
    xte, yte = load(folder, "t10k")
    n_test = min(n_test, len(yte))
    torch.manual_seed(0)
    model = ViT()
    lr_max = 2e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr_max, weight_decay=0.05)
    print(f"torch vit: {len(ytr)} train / {n_test} test images, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {steps} steps of {batch}")
    rng = SplitMix64(1234)
    t0 = time.perf_counter()
    for step in range(steps):
        idx = torch.tensor([rng.next() % len(ytr) for _ in range(batch)])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr_max)
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} "
                  f"({(time.perf_counter() - t0) / (step + 1) * 1e3:.0f} ms/step)", flush=True)
    train_s = time.perf_counter() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for k in range(0, n_test, 500):
            end = min(n_test, k + 500)
            correct += (model(xte[k:end]).argmax(1) == yte[k:end]).sum().item()
    print(f"torch training {train_s:.1f} s ({train_s / steps * 1e3:.0f} ms/step)")
    print(f"test accuracy: {correct / n_test:.4f}")


if __name__ == "__main__":
    main()
