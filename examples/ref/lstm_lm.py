#!/usr/bin/python3
"""The PyTorch twin of examples/lstm_lm.c: the same character-level LSTM
language model (embedding 64, a 2-layer nn.LSTM of hidden size 256, batch
first, a linear head), PyTorch's default initialisation, trained by the same
truncated BPTT (the first 90% of the text cut into BATCH contiguous streams,
T = 64 characters of each per step, the state carried across steps and
detached), with the same Adam schedule (lr 2e-3, linear warm-up over 5% of
the steps, cosine decay to a tenth) and gradient clipping at 1; validated on
the same 32 streams of the last 10%, state carried. Prints the validation
loss in nats per character.

    /usr/bin/python3 examples/ref/lstm_lm.py [text-file]

The text file comes from argv[1], else $OAR_TEXT, else bible-kjv.txt
(scripts/bible-text.sh writes it). Environment as for the C example:
OAR_EXAMPLE_STEPS (600), OAR_EXAMPLE_BATCH (32), OAR_EXAMPLE_EVAL
(characters per validation stream, 512), OAR_EXAMPLE_SAMPLE (characters to
generate, 300), OAR_EXAMPLE_THREADS (torch threads, 1)."""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1
EMB, HIDDEN, LAYERS, T, EVAL_STREAMS = 64, 256, 2, 64, 32


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


class LSTMLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, EMB)
        self.lstm = nn.LSTM(EMB, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.head = nn.Linear(HIDDEN, vocab)

    def forward(self, idx, state):
        out, (h, c) = self.lstm(self.embed(idx), state)
        return self.head(out), (h.detach(), c.detach())


def lr_at(step, steps, lr_max):
    warm = max(1, steps // 20)
    if step < warm:
        return lr_max * (step + 1) / warm
    lo = lr_max / 10
    return lo + 0.5 * (lr_max - lo) * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def chunk(ids, starts, pos):
    x = torch.stack([ids[s + pos:s + pos + T] for s in starts])
    y = torch.stack([ids[s + pos + 1:s + pos + T + 1] for s in starts])
    return x, y


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OAR_TEXT", "bible-kjv.txt")
    steps, batch = env("OAR_EXAMPLE_STEPS", 600), env("OAR_EXAMPLE_BATCH", 32)
    eval_len = env("OAR_EXAMPLE_EVAL", 512) // T * T
    n_sample = env("OAR_EXAMPLE_SAMPLE", 300)
    lr_max = 2e-3
    torch.set_num_threads(env("OAR_EXAMPLE_THREADS", 1))
    data = open(path, "rb").read()
    chars = sorted(set(data))
    code = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([code[c] for c in data], dtype=torch.long)
    n_train = len(data) * 9 // 10
    stream_len, val_stride = n_train // batch, (len(data) - n_train) // EVAL_STREAMS
    assert steps * T + 1 <= stream_len and eval_len + 1 <= val_stride, "text too short"
    torch.manual_seed(0)
    model = LSTMLM(len(chars))
    opt = torch.optim.Adam(model.parameters(), lr=lr_max)
    print(f"torch lstm_lm: {len(data)} characters ({len(chars)} distinct), "
          f"{sum(p.numel() for p in model.parameters())} parameters, {steps} steps of "
          f"{batch} x {T}")
    starts = [b * stream_len for b in range(batch)]
    state = None
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = chunk(ids, starts, step * T)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr_max)
        logits, state = model(x, state)
        loss = F.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} "
                  f"({(time.perf_counter() - t0) / (step + 1) * 1e3:.0f} ms/step)", flush=True)
    train_s = time.perf_counter() - t0

    model.eval()
    with torch.no_grad():
        starts = [n_train + s * val_stride for s in range(EVAL_STREAMS)]
        state, total = None, 0.0
        for pos in range(0, eval_len, T):
            x, y = chunk(ids, starts, pos)
            logits, state = model(x, state)
            total += F.cross_entropy(logits.reshape(-1, len(chars)), y.reshape(-1),
                                     reduction="sum").item()
        val = total / (EVAL_STREAMS * eval_len)
        out = list(b"And God said")
        feed, state = out[:], None
        srng = SplitMix64(99)
        for _ in range(n_sample):
            logits, state = model(torch.tensor([[code[c] for c in feed]]), state)
            p = torch.softmax(logits[0, -1] / 0.8, -1).tolist()
            u = (srng.next() >> 11) / float(1 << 53)
            i, acc = 0, p[0]
            while acc <= u and i + 1 < len(p):
                i += 1
                acc += p[i]
            out.append(chars[i])
            feed = [chars[i]]
    print("sample:\n" + bytes(out).decode("ascii", "replace"))
    print(f"torch training {train_s:.1f} s ({train_s / steps * 1e3:.0f} ms/step)")
    print(f"validation loss: {val:.4f} nats/char")


if __name__ == "__main__":
    main()
