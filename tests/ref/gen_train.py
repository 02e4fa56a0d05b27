#!/usr/bin/python3
"""Reference values for the training layer (tests/nn, tests/io), computed
with PyTorch: optimizer steps on a tiny linear model with fixed weights and
gradients, learning-rate schedules, gradient clipping, PyTorch's default
init bounds; and a safetensors fixture written by Python (a plain writer
following the format spec, no safetensors package needed).

Run from the repository root:  /usr/bin/python3 tests/ref/gen_train.py
Writes tests/ref/train_ref.h and tests/io/fixture_py.safetensors."""
import json
import math
import os
import struct

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = []


def arr(name, values, ctype="double"):
    flat = [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]
    body = ", ".join(repr(v) for v in flat)
    out.append(f"static const {ctype} {name}[{max(len(flat), 1)}] = {{{body}}};")


# ---- optimizers: W [3, 4], b [3]; three steps with fixed gradients --------
W0 = np.linspace(-1.0, 1.2, 12).reshape(3, 4)
B0 = np.array([0.1, -0.2, 0.3])
GW = [np.sin(np.arange(12) * (s + 1) * 0.7).reshape(3, 4) for s in range(3)]
GB = [np.cos(np.arange(3) * (s + 2) * 0.9) for s in range(3)]
arr("train_w0", W0)
arr("train_b0", B0)
arr("train_gw", np.stack(GW))
arr("train_gb", np.stack(GB))


def run(make):
    w = torch.tensor(W0, requires_grad=True)
    b = torch.tensor(B0, requires_grad=True)
    opt = make([w, b])
    ws, bs = [], []
    for s in range(3):
        w.grad = torch.tensor(GW[s])
        b.grad = torch.tensor(GB[s])
        opt.step()
        ws.append(w.detach().numpy().copy())
        bs.append(b.detach().numpy().copy())
    return np.stack(ws), np.stack(bs)


cases = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_mom": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.02),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1),
}
for name, make in cases.items():
    ws, bs = run(make)
    arr(f"train_{name}_w", ws)
    arr(f"train_{name}_b", bs)

# ---- schedules: lr after each of 7 scheduler steps -------------------------
for name, make in {
    "steplr": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
}.items():
    w = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.2)
    sch = make(opt)
    lrs = []
    for _ in range(5):
        opt.step()
        sch.step()
        lrs.append(opt.param_groups[0]["lr"])
    arr(f"train_{name}_lrs", lrs)

# ---- gradient clipping -----------------------------------------------------
w = torch.tensor(W0, requires_grad=True)
b = torch.tensor(B0, requires_grad=True)
w.grad = torch.tensor(GW[0])
b.grad = torch.tensor(GB[0])
norm = torch.nn.utils.clip_grad_norm_([w, b], max_norm=1.5)
arr("train_clip_norm", [norm.item()])
arr("train_clip_gw", w.grad.numpy())
arr("train_clip_gb", b.grad.numpy())

# ---- default init bounds of Linear(20, 7) and Conv2d(3, 8, 3) ----------------
arr("train_init_bounds", [1 / math.sqrt(20), 1 / math.sqrt(27)])

# ---- end to end: a 4-5-3 tanh MLP, cross entropy, backward, 6 Adam steps -----
X = np.cos(np.arange(24) * 1.3).reshape(6, 4)
Y = np.array([0, 2, 1, 1, 0, 2])
P0 = {"fc1.weight": np.sin(np.arange(20) * 0.9).reshape(5, 4) * 0.5,
      "fc1.bias": np.linspace(-0.2, 0.2, 5),
      "fc2.weight": np.cos(np.arange(15) * 0.7).reshape(3, 5) * 0.5,
      "fc2.bias": np.array([0.05, -0.05, 0.0])}
ps = {k: torch.tensor(v, requires_grad=True) for k, v in P0.items()}
opt = torch.optim.Adam(ps.values(), lr=0.05)
losses = []
for _ in range(6):
    h = torch.tanh(torch.tensor(X) @ ps["fc1.weight"].T + ps["fc1.bias"])
    loss = torch.nn.functional.cross_entropy(h @ ps["fc2.weight"].T + ps["fc2.bias"], torch.tensor(Y))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
arr("train_mlp_x", X)
arr("train_mlp_y", Y)
for k, v in P0.items():
    arr("train_mlp_" + k.replace(".", "_"), v)
arr("train_mlp_losses", losses)
arr("train_mlp_fc1_weight_final", ps["fc1.weight"].detach().numpy())

# ---- a safetensors file written by Python ----------------------------------
DT = {np.float16: "F16", np.float32: "F32", np.float64: "F64", np.int32: "I32",
      np.int64: "I64", np.uint8: "U8", np.bool_: "BOOL", np.complex64: "C64",
      np.complex128: "C128"}
fixture = [
    ("layer.weight", np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5, None),
    ("layer.bias", np.array([1.5, -2.25], dtype=np.float64), None),
    ("half", np.array([0.5, -1.0, 65504.0], dtype=np.float16), None),
    ("brain", None, "BF16"),
    ("steps", np.array([[1, -2], [3, 1 << 40]], dtype=np.int64), None),
    ("ints", np.array([7, -8, 9], dtype=np.int32), None),
    ("bytes", np.array([0, 128, 255], dtype=np.uint8), None),
    ("mask", np.array([True, False, True, True]), None),
    ("z", np.array([1 + 2j, -3.5 - 0.25j], dtype=np.complex64), None),
    ("zz", np.array([[0.5 - 1j]], dtype=np.complex128), None),
    ("scalar", np.array(3.25, dtype=np.float32), None),
    ("empty", np.zeros((0, 4), dtype=np.float32), None),
]
header, blobs, off = {"__metadata__": {"format": "pt", "source": "gen_train.py"}}, [], 0
bf16_vals = torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16)
for name, a, forced in fixture:
    if forced == "BF16":
        raw = bf16_vals.view(torch.int16).numpy().astype("<i2").tobytes()
        dtype, shape = "BF16", [3]
    else:
        raw = np.ascontiguousarray(a).tobytes()  # little-endian host
        dtype, shape = DT[a.dtype.type], list(a.shape)
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(ROOT, "io", "fixture_py.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

with open(os.path.join(ROOT, "ref", "train_ref.h"), "w") as f:
    f.write("/* Generated by tests/ref/gen_train.py (PyTorch %s); do not edit. */\n" % torch.__version__)
    f.write("#ifndef TRAIN_REF_H\n#define TRAIN_REF_H\n\n")
    f.write("\n".join(out))
    f.write("\n\n#endif\n")
