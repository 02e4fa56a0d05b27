# Peer for bench_pinn: one PINN training step in float64 with
# torch.autograd.grad(create_graph=True) for u_xx, u_yy, backward, Adam.
# "pinn_step": torch.set_num_threads(1); "pinn_step_2t": set_num_threads(2).
import time
import torch

torch.manual_seed(0)
H, N = 32, 1024
dt = torch.float64


def param(*shape, scale):
    return (torch.randn(*shape, dtype=dt) * scale).requires_grad_()


p = [param(1, H, scale=0.5 ** 0.5), param(1, H, scale=0.5 ** 0.5), param(H, scale=0.1),
     param(H, H, scale=(1 / H) ** 0.5), param(H, scale=0.1), param(H, 1, scale=(1 / H) ** 0.5)]
x = torch.rand(N, 1, dtype=dt).requires_grad_()
y = torch.rand(N, 1, dtype=dt).requires_grad_()
f = torch.randn(N, 1, dtype=dt)
opt = torch.optim.Adam(p, lr=1e-3)


def loss_fn():
    h = torch.tanh(x @ p[0] + y @ p[1] + p[2])
    h = torch.tanh(h @ p[3] + p[4])
    u = x * (1 - x) * y * (1 - y) * (h @ p[5])
    ux, uy = torch.autograd.grad(u.sum(), (x, y), create_graph=True)
    uxx, = torch.autograd.grad(ux.sum(), x, create_graph=True)
    uyy, = torch.autograd.grad(uy.sum(), y, create_graph=True)
    return ((uxx + uyy + f) ** 2).mean()


def run(name, warm, steps):
    for s in range(warm + steps):
        if s == warm:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
    print(f"torch {name} {(time.perf_counter() - t0) * 1e3 / steps:.3f} ms")


torch.set_num_threads(1)
run("pinn_step", 5, 50)
torch.set_num_threads(2)
run("pinn_step_2t", 5, 50)
