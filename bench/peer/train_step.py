# Peer for bench_train_step: the same LeNet-5 (batch 64, SGD with momentum)
# and character Transformer (4 pre-norm layers, d 128, 4 heads, feed-forward
# 512, context 64, vocabulary 73, batch 8, AdamW) training steps in PyTorch,
# each model in its own process for its peak RSS (ru_maxrss).
# torch 1 thread + OpenBLAS 2 threads (the peer-env README).
import resource
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

D, T, VOCAB = 128, 64, 73


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, 4, 512, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(4))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(T))
        for layer in self.layers:
            x = layer(x, src_mask=self.mask)
        return self.head(self.norm(x))


def lenet5():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def run(name):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lm = name == "transformer"
    m = CharLM() if lm else lenet5()
    if lm:
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        x = torch.randint(0, VOCAB, (8, T))
        y = torch.randint(0, VOCAB, (8 * T,))
    else:
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 1, 28, 28)
        y = torch.randint(0, 10, (64,))
    warm, steps = 3, (20 if lm else 50)
    for s in range(warm + steps):
        if s == warm:
            t0 = time.perf_counter()
        out = m(x)
        if lm:
            out = out.reshape(-1, VOCAB)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ms = (time.perf_counter() - t0) * 1e3 / steps
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch {name}_step {ms:.3f} ms")
    print(f"torch {name}_peak_rss {rss:.1f} MB", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(sys.argv[1])
    else:
        for name in ("lenet5", "transformer"):
            subprocess.run([sys.executable, __file__, name], check=True)
