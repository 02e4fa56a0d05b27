# Peer for bench_hvp: Hessian-vector product of a 3-layer tanh MLP
# (256-256-256-10, batch 256, loss mean of squared outputs) w.r.t. its
# weights: torch.autograd.grad(create_graph=True) twice. Best of 5 rounds
# of 5, torch.set_num_threads(1).
import time
import torch

torch.set_num_threads(1)
torch.manual_seed(0)
w = [(torch.randn(256, 256) * 0.06).requires_grad_(), (torch.randn(256, 256) * 0.06).requires_grad_(),
     (torch.randn(256, 10) * 0.06).requires_grad_()]
v = [torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 10)]
x = torch.randn(256, 256)
best = 1e30
for r in range(6):
    t0 = time.perf_counter()
    for _ in range(5):
        h = torch.tanh(x @ w[0])
        h = torch.tanh(h @ w[1])
        loss = (h @ w[2]).square().mean()
        g = torch.autograd.grad(loss, w, create_graph=True)
        hv = torch.autograd.grad(g, w, grad_outputs=v, create_graph=True)
    ms = (time.perf_counter() - t0) * 1e3 / 5
    if r > 0:
        best = min(best, ms)
print(f"torch hvp_tanh_mlp {best:.3f} ms")
