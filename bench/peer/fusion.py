# Peer of bench/bench_fusion.c: eager PyTorch on the same graphs and shapes
# (torch.compile is not in Debian's torch 1.13; see bench/RESULTS.md).
import time
import torch

torch.manual_seed(0)


def best_ms(fn, x, reps=20, rounds=3):
    fn(x)
    best = 1e30
    for _ in range(rounds * reps):
        t0 = time.perf_counter()
        fn(x)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def chain(x):
    y = (x + 1.0) * 0.5
    y = torch.tanh(-y)
    y = torch.sigmoid(y * x)
    return torch.relu(y) - x


w, b = torch.randn(1024), torch.randn(1024)


def ln_gelu(x):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (1024,), w, b, 1e-5))


def softmax(x):
    return torch.softmax(x * 0.125, -1)


with torch.no_grad():
    print("torch chain8_4M %.4f ms" % best_ms(chain, torch.randn(1 << 22)))
    print("torch ln_gelu_4096x1024 %.4f ms" % best_ms(ln_gelu, torch.randn(4096, 1024)))
    print("torch softmax_4096x1024 %.4f ms" % best_ms(softmax, torch.randn(4096, 1024)))
