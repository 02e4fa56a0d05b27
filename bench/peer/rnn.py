# Peer for bench_rnn: torch.nn.LSTM(128, 128) forward + backward, seq_len 32,
# batch 32, loss sum of the outputs, gradients of the weights and input; the
# same for torch.nn.GRU(128, 128).
# Best of 5 rounds of 5, torch.set_num_threads(1).
import time
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
T, B, I, H = 32, 32, 128, 128
lstm = torch.nn.LSTM(I, H)
x = torch.randn(T, B, I, requires_grad=True)
wrt = list(lstm.parameters()) + [x]
best = 1e30
for r in range(6):
    t0 = time.perf_counter()
    for _ in range(5):
        y, _ = lstm(x)
        g = torch.autograd.grad(y.sum(), wrt)
    ms = (time.perf_counter() - t0) * 1e3 / 5
    if r > 0:
        best = min(best, ms)
print(f"torch lstm_fwd_bwd_fused {best:.3f} ms")
# oar's traced form against the same eager figure: torch has no graph form of it
print(f"torch lstm_fwd_bwd_graph {best:.3f} ms")

gru = torch.nn.GRU(I, H)
wrt = list(gru.parameters()) + [x]
best = 1e30
for r in range(6):
    t0 = time.perf_counter()
    for _ in range(5):
        y, _ = gru(x)
        g = torch.autograd.grad(y.sum(), wrt)
    ms = (time.perf_counter() - t0) * 1e3 / 5
    if r > 0:
        best = min(best, ms)
print(f"torch gru_fwd_bwd {best:.3f} ms")
