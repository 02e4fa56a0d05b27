#!/usr/bin/python3
"""The PyTorch twin of examples/gp.c: Gaussian-process regression whose
kernel hyperparameters (log length scale, log signal variance, log noise
variance, starting at 0) are learned by minimizing the exact negative log
marginal likelihood through torch.linalg.cholesky and torch.linalg.solve,
in float64, with Adam (lr 0.05). The same data, drawn by the same
splitmix64 stream from seed 2024; prints the learned hyperparameters, the
final nll and the test RMSE against the noise-free function.

    /usr/bin/python3 examples/ref/gp.py

Environment as for the C example: OAR_EXAMPLE_STEPS (Adam steps, 300)."""
import math
import os

import torch

M64 = (1 << 64) - 1
N_TRAIN, N_TEST = 256, 401


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform01(self):
        return (self.next() >> 11) / 9007199254740992.0


def truth(x):
    return math.sin(2 * x) + 0.4 * math.cos(5 * x)


def make_data():
    rng = SplitMix64(2024)
    xtr, ytr = [], []
    for _ in range(N_TRAIN):
        x = -3 + 6 * rng.uniform01()
        u1, u2 = rng.uniform01(), rng.uniform01()
        noise = math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2)
        xtr.append(x)
        ytr.append(truth(x) + 0.2 * noise)
    xte = [-3 + 6 * i / (N_TEST - 1) for i in range(N_TEST)]
    fte = [truth(x) for x in xte]
    t = lambda v: torch.tensor(v, dtype=torch.float64)
    return t(xtr), t(ytr), t(xte), t(fte)


def kernel(theta, d2):
    return theta[1].exp() * torch.exp(-0.5 * d2 * torch.exp(-2 * theta[0]))


def train_cov(theta, d2):
    return kernel(theta, d2) + theta[2].exp() * torch.eye(d2.shape[0], dtype=torch.float64)


def nll(theta, d2, y):
    L = torch.linalg.cholesky(train_cov(theta, d2))
    z = torch.linalg.solve(L, y)
    return 0.5 * (z * z).sum() + torch.log(torch.diagonal(L)).sum() + 0.5 * N_TRAIN * math.log(2 * math.pi)


def main():
    steps = int(os.environ.get("OAR_EXAMPLE_STEPS") or 300)
    x, y, xs, fs = make_data()
    d2 = (x[:, None] - x[None, :]) ** 2
    d2_test = (xs[:, None] - x[None, :]) ** 2
    print(f"torch gp: {N_TRAIN} training points, {N_TEST} test points, {steps} Adam steps")
    theta = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.05)
    first = last = None
    for step in range(steps):
        loss = nll(theta, d2, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = loss.item()
        first = last if first is None else first
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} nll {last:.6f}")
    with torch.no_grad():
        L = torch.linalg.cholesky(train_cov(theta, d2))
        alpha = torch.linalg.solve(L.T, torch.linalg.solve(L, y))
        mean = kernel(theta, d2_test) @ alpha
        final = nll(theta, d2, y).item()
        rmse = torch.sqrt(((mean - fs) ** 2).mean()).item()
    t = theta.detach().tolist()
    print(f"learned: length scale {math.exp(t[0]):.6f}, signal variance {math.exp(t[1]):.6f}, "
          f"noise variance {math.exp(t[2]):.6f} (noise std {math.exp(0.5 * t[2]):.6f}; data made with 0.2)")
    if last < first:
        print(f"nll decreased: first {first:.6f} last {last:.6f}")
    print(f"nll: {final:.10f}")
    print(f"test rmse: {rmse:.10f}")


if __name__ == "__main__":
    main()
