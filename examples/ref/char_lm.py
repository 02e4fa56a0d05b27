#!/usr/bin/python3
"""The PyTorch twin of examples/char_lm.c: the same character-level
Transformer language model (4 pre-norm encoder layers, d 128, 4 heads,
feed-forward 512, GELU, causal, context 64, learned position embedding),
PyTorch's default initialisation, the same training windows in the same
order (splitmix64 from seed 1234), the same AdamW schedule (linear warm-up,
cosine decay to a tenth), gradient clipping at 1, and the same validation
windows. Prints the validation loss in nats per character.

    /usr/bin/python3 examples/ref/char_lm.py [text-file]

The text file comes from argv[1], else $OAR_TEXT, else bible-kjv.txt
(scripts/bible-text.sh writes it). Environment as for the C example:
OAR_EXAMPLE_STEPS (300), OAR_EXAMPLE_BATCH (16), OAR_EXAMPLE_EVAL (validation
windows, 128), OAR_EXAMPLE_SAMPLE (characters to generate, 300),
OAR_EXAMPLE_LR (2e-3), OAR_EXAMPLE_THREADS (torch threads, 1)."""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1


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


D, HEADS, LAYERS, FF, T = 128, 4, 4, 512, 64


class CharLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, D)
        self.pos = nn.Embedding(T, D)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, vocab)

    def forward(self, idx):
        L = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(L))
        mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        return self.head(self.norm(x))


def lr_at(step, steps, lr_max):
    warm = max(1, min(20, steps // 10))
    if step < warm:
        return lr_max * (step + 1) / warm
    lo = lr_max / 10
    return lo + 0.5 * (lr_max - lo) * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OAR_TEXT", "bible-kjv.txt")
    steps, batch = env("OAR_EXAMPLE_STEPS", 300), env("OAR_EXAMPLE_BATCH", 16)
    n_eval, n_sample = env("OAR_EXAMPLE_EVAL", 128), env("OAR_EXAMPLE_SAMPLE", 300)
    lr_max = env("OAR_EXAMPLE_LR", 2e-3)
    # OAR_EXAMPLE_AUTOCAST=bf16: forward and loss under torch.autocast("cpu", bfloat16)
    ac = os.environ.get("OAR_EXAMPLE_AUTOCAST", "")
    cast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=ac == "bf16")
    torch.set_num_threads(env("OAR_EXAMPLE_THREADS", 1))
    data = open(path, "rb").read()
    chars = sorted(set(data))
    code = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([code[c] for c in data], dtype=torch.long)
    n_train = len(data) * 9 // 10
    n_val = len(data) - n_train
    torch.manual_seed(0)
    model = CharLM(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=lr_max, weight_decay=0.01)
    print(f"torch char_lm: {len(data)} characters ({len(chars)} distinct), "
          f"{sum(p.numel() for p in model.parameters())} parameters, {steps} steps of "
          f"{batch} x {T}")
    rng = SplitMix64(1234)
    t0 = time.perf_counter()
    for step in range(steps):
        offs = [rng.next() % (n_train - T - 1) for _ in range(batch)]
        x = torch.stack([ids[o:o + T] for o in offs])
        y = torch.stack([ids[o + 1:o + T + 1] for o in offs])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr_max)
        with cast():
            loss = F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} "
                  f"({(time.perf_counter() - t0) / (step + 1) * 1e3:.0f} ms/step)", flush=True)
    train_s = time.perf_counter() - t0

    model.eval()
    stride = (n_val - T - 1) // n_eval
    total = 0.0
    with torch.no_grad():
        for k in range(0, n_eval, 32):
            offs = [n_train + j * stride for j in range(k, min(n_eval, k + 32))]
            x = torch.stack([ids[o:o + T] for o in offs])
            y = torch.stack([ids[o + 1:o + T + 1] for o in offs])
            with cast():
                total += F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1),
                                         reduction="sum").float().item()
        val = total / (n_eval * T)
        ctx = list(b"And God said")
        srng = SplitMix64(99)
        for _ in range(n_sample):
            x = torch.tensor([[code[c] for c in ctx[-T:]]])
            p = torch.softmax(model(x)[0, -1] / 0.8, -1).tolist()
            u = (srng.next() >> 11) / float(1 << 53)
            i, acc = 0, p[0]
            while acc <= u and i + 1 < len(p):
                i += 1
                acc += p[i]
            ctx.append(chars[i])
    print("sample:\n" + bytes(ctx).decode("ascii", "replace"))
    print(f"torch training {train_s:.1f} s ({train_s / steps * 1e3:.0f} ms/step)")
    print(f"validation loss: {val:.4f} nats/char")


if __name__ == "__main__":
    main()
