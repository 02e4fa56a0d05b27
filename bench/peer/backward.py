# Peer for bench_backward: loss.backward() alone of the MLP 784-512-512-10
# (batch 128) and of a LeNet-5-size CNN (batch 64), forward untimed; best of
# 5 rounds of 10, torch.set_num_threads(1) (OpenBLAS follows it).
import time
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(0)


def param(*shape, scale):
    return (torch.randn(*shape) * scale).requires_grad_()


mp = [param(784, 512, scale=0.05), param(512, scale=0.05), param(512, 512, scale=0.05),
      param(512, scale=0.05), param(512, 10, scale=0.05), param(10, scale=0.05)]
cp = [param(6, 1, 5, 5, scale=0.1), param(6, scale=0.1), param(16, 6, 5, 5, scale=0.1),
      param(16, scale=0.1), param(400, 120, scale=0.1), param(120, scale=0.1),
      param(120, 84, scale=0.1), param(84, scale=0.1), param(84, 10, scale=0.1), param(10, scale=0.1)]


def mlp_loss(x, y):
    h = x
    for l in range(3):
        h = h @ mp[2 * l] + mp[2 * l + 1]
        if l < 2:
            h = torch.relu(h)
    return F.cross_entropy(h, y)


def cnn_loss(x, y):
    h = F.max_pool2d(torch.relu(F.conv2d(x, cp[0], cp[1], padding=2)), 2)
    h = F.max_pool2d(torch.relu(F.conv2d(h, cp[2], cp[3])), 2)
    h = torch.flatten(h, 1)
    for l in range(3):
        h = h @ cp[4 + 2 * l] + cp[5 + 2 * l]
        if l < 2:
            h = torch.relu(h)
    return F.cross_entropy(h, y)


def time_backward(fn, x, y, params, rounds=5, n=10):
    best = 1e30
    for r in range(rounds + 1):
        total = 0.0
        for _ in range(n):
            loss = fn(x, y)
            t0 = time.perf_counter()
            loss.backward()
            total += time.perf_counter() - t0
            for p in params:
                p.grad = None
        if r > 0:
            best = min(best, total / n)
    return best * 1e3


x, y = torch.randn(128, 784), torch.randint(0, 10, (128,))
cx, cy = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
print(f"torch backward_mlp {time_backward(mlp_loss, x, y, mp):.3f} ms")
print(f"torch backward_lenet {time_backward(cnn_loss, cx, cy, cp):.3f} ms")
