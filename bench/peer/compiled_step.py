# Peer of bench/bench_compiled_step.c: the same character transformer
# (embeddings, 4 pre-norm causal encoder layers d 128 / 4 heads / FF 512 /
# GELU, final LayerNorm, vocab head), batch 16 x 64, cross entropy, SGD.
# Prints PyTorch eager's step and, with PyTorch 2, torch.compile's
# (Inductor, CPU) as "torch step_ms": the figure oar's compiled step is
# compared with. Debian's torch 1.13 has no torch.compile: run this with a
# PyTorch 2 interpreter (a venv from PyPI) for that line.
import time
import torch
import torch.nn as nn

D, T, VOCAB, BATCH, STEPS, WINDOWS = 128, 64, 73, 16, 10, 5
torch.manual_seed(0)


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, 4, 512, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
            for _ in range(4))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))
        self.register_buffer("positions", torch.arange(T))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(self.positions)
        for layer in self.layers:
            x = layer(x, src_mask=self.mask)
        return self.head(self.norm(x))


def step_time(model, step_fn, x, y, name):
    """ms per step: the median over WINDOWS windows of STEPS steps, as
    bench_compiled_step measures oar (the best window on a comment line)."""
    for _ in range(3):
        step_fn(model, x, y)
    windows = []
    for _ in range(WINDOWS):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step_fn(model, x, y)
        windows.append((time.perf_counter() - t0) * 1e3 / STEPS)
    windows.sort()
    print("# %s best of %d windows of %d steps: %.3f ms" % (name, WINDOWS, STEPS, windows[0]))
    return windows[WINDOWS // 2]


def make_step(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step(m, x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(m(x).reshape(-1, VOCAB), y)
        loss.backward()
        opt.step()
    return step


x = torch.randint(0, VOCAB, (BATCH, T))
y = torch.randint(0, VOCAB, (BATCH * T,))
eager = CharLM()
print("torch eager_step_ms %.3f ms" % step_time(eager, make_step(eager), x, y, "eager"))
if hasattr(torch, "compile"):
    model = CharLM()
    compiled = torch.compile(model)
    t0 = time.perf_counter()
    make_step(model)(compiled, x, y)  # compiles forward and backward
    print("# torch.compile first step (compiling) %.0f ms" % ((time.perf_counter() - t0) * 1e3))
    print("torch step_ms %.3f ms" % step_time(compiled, make_step(model), x, y, "torch.compile"))
