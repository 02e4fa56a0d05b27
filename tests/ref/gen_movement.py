#!/usr/bin/python3
"""Writes tests/ref/movement_ref.h: expected values of the shape and movement
ops computed by PyTorch (1.13). Inputs are aranges (exact in every dtype), so
the C test builds them itself; this file stores the results and their shapes.

Run from the repo root: /usr/bin/python3 tests/ref/gen_movement.py
"""
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def ar(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape)


def grad_of(fn, x, gout_seed=1.0):
    """Gradient of sum(fn(x) * g) with g = arange(numel) + seed: the
    transposed op applied to g (what the *_backward kernels compute)."""
    x = x.clone().requires_grad_(True)
    y = fn(x)
    g = torch.arange(float(y.numel())).reshape(y.shape) + gout_seed
    (y * g).sum().backward()
    return x.grad


x34 = ar(3, 4)
x234 = ar(2, 3, 4)
x23 = ar(2, 3)
x37 = ar(3, 7)

CASES = [
    # name, result
    ("reshape_t", x34.t().reshape(2, 6)),
    ("reshape_infer", x234.permute(2, 0, 1).reshape(-1, 3)),
    ("permute", x234.permute(2, 0, 1)),
    ("transpose", x234.transpose(0, 2)),
    ("expand", ar(3, 1).expand(2, 3, 4)),
    ("flatten", x234.permute(1, 0, 2).flatten(1, 2)),
    ("slice_step", x37[:, 1:-1:2]),
    ("slice_clamp", x37[:, -100:100:3]),
    ("slice_dim0", x37[-2:]),
    ("diag_p1", torch.diagonal(x34, 1)),
    ("diag_m1", torch.diagonal(x34, -1)),
    ("diag_3d", torch.diagonal(x234, 1, 0, 2)),
    ("diag_t", torch.diagonal(x34.t(), 0)),
    ("concat_t", torch.cat([x23, ar(2, 2).t() + 100], 1)),
    ("concat_0", torch.cat([x23, ar(0, 3), ar(1, 3) + 50], 0)),
    ("concat_neg", torch.cat([ar(2, 2, 1), ar(2, 2, 2) + 10], -1)),
    ("stack_1", torch.stack([x23, x23 + 10], 1)),
    ("stack_last", torch.stack([x23, x23 + 10, x23 + 20], -1)),
    ("pad_const", F.pad(x23, (1, 2, 0, 1), value=7.0)),
    ("pad_const_neg", F.pad(ar(1, 3, 4), (-1, 2, 1, -2))),
    ("pad_reflect", F.pad(ar(1, 2, 4), (2, 3), mode="reflect")),
    ("pad_reflect_neg", F.pad(ar(1, 3, 4), (-1, 2), mode="reflect")),
    ("pad_reflect_2d", F.pad(ar(1, 1, 3, 4), (1, 2, 2, 1), mode="reflect")),
    ("pad_replicate", F.pad(ar(1, 2, 3), (2, 3), mode="replicate")),
    ("pad_replicate_2d", F.pad(ar(1, 1, 2, 3), (2, 1, 1, 3), mode="replicate")),
    ("pad_t", F.pad(x34.t(), (1, 1), value=-1.0)),
    ("flip_02", torch.flip(x234, (0, 2))),
    ("flip_t", torch.flip(x34.t(), (1,))),
    ("flip_all", torch.flip(x234, (0, 1, 2))),
    ("roll_2d", torch.roll(x34, (1, -2), (0, 1))),
    ("roll_flat", torch.roll(x23, 3)),
    ("roll_same_dim", torch.roll(x34, (1, 2), (1, 1))),
    ("roll_t", torch.roll(x34.t(), 5, 0)),
    ("repeat_2d", ar(2, 2).repeat(2, 3)),
    ("repeat_more", ar(3).repeat(2, 1, 2)),
    ("repeat_big", ar(1, 2, 1, 2, 1).repeat(2, 1, 3, 1, 2, 2, 2, 2)),
    ("tril_0", torch.tril(x34)),
    ("tril_1", torch.tril(x34, 1)),
    ("tril_m1_b", torch.tril(ar(2, 3, 3), -1)),
    ("triu_0", torch.triu(x34)),
    ("triu_m1", torch.triu(x34, -1)),
    ("triu_2_t", torch.triu(x34.t(), 2)),
    # transposes used by gradient rules (gradient g = arange + 1 of the output)
    ("slice_bwd", grad_of(lambda x: x[:, 1:6:2], x37)),
    ("diag_bwd", grad_of(lambda x: torch.diagonal(x, 1, 0, 2), x234)),
    ("diag_bwd_m1", grad_of(lambda x: torch.diagonal(x, -1), x34)),
    ("pad_reflect_bwd", grad_of(lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), ar(1, 1, 3, 4))),
    ("pad_replicate_bwd", grad_of(lambda x: F.pad(x, (3, 1), mode="replicate"), ar(2, 3))),
    # gradient rules: d/dx sum(f(x) * (arange + 1))
    ("g_view", grad_of(lambda x: x.reshape(4, 6), x234)),
    ("g_permute", grad_of(lambda x: x.permute(2, 0, 1), x234)),
    ("g_expand", grad_of(lambda x: x.expand(2, 3, 4), ar(3, 1))),
    ("g_slice", grad_of(lambda x: x[:, 1:6:2], x37)),
    ("g_diag", grad_of(lambda x: torch.diagonal(x, 1, 0, 2), x234)),
    ("g_concat_a", grad_of(lambda x: torch.cat([x, ar(2, 2)], 1), x23)),
    ("g_concat_b", grad_of(lambda x: torch.cat([x23, x], 1), ar(2, 2))),
    ("g_pad_const", grad_of(lambda x: F.pad(x, (-1, 2, 1, -2)), ar(1, 3, 4))),
    ("g_pad_reflect", grad_of(lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), ar(1, 1, 3, 4))),
    ("g_pad_replicate", grad_of(lambda x: F.pad(x, (3, 1), mode="replicate"), ar(2, 3))),
    ("g_flip", grad_of(lambda x: torch.flip(x, (0, 2)), x234)),
    ("g_roll", grad_of(lambda x: torch.roll(x, (1, -2), (0, 1)), x34)),
    ("g_tril", grad_of(lambda x: torch.tril(x, 1), x34)),
    ("g_triu", grad_of(lambda x: torch.triu(x, -1), x34)),
    ("g_repeat", grad_of(lambda x: x.repeat(2, 1, 3), ar(2, 2))),
    ("g_reshape_t", grad_of(lambda x: x.t().reshape(2, 6), x34)),
    ("g_stack", grad_of(lambda x: torch.stack([x, x.t()], 1), ar(3, 3))),
    ("g_flip_t", grad_of(lambda x: torch.flip(x.t(), (1,)), x34)),
    # second order: the transposes' rules give the forward op of (arange + 1)
    ("g2_slice", (x37 + 1)[:, 1:6:2]),
    ("g2_diag", torch.diagonal(x234 + 1, 1, 0, 2)),
    ("g2_pad_reflect", F.pad(ar(1, 1, 3, 4) + 1, (1, 2, 2, 1), mode="reflect")),
]


def c_array(name, ctype, vals):
    body = ", ".join(vals) if vals else "0"
    return f"static const {ctype} {name}[] = {{{body}}};\n"


def num(v):
    v = float(v)
    return repr(int(v)) + ".0" if v == int(v) else repr(v)


def main():
    out = [
        "/* Generated by tests/ref/gen_movement.py (PyTorch %s); do not edit. */\n" % torch.__version__,
        "#ifndef MOVEMENT_REF_H\n#define MOVEMENT_REF_H\n#include <stdint.h>\n\n",
    ]
    for name, t in CASES:
        t = t.detach().contiguous()
        vals = [num(v) for v in t.flatten().tolist()]
        out.append(c_array(f"ref_{name}", "double", vals))
        out.append(c_array(f"ref_{name}_shape", "int64_t", [str(s) for s in t.shape]))
        out.append(f"#define ref_{name}_ndim {t.dim()}\n#define ref_{name}_numel {t.numel()}\n\n")
    out.append("#endif\n")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "movement_ref.h")
    with open(path, "w") as f:
        f.write("".join(out))


if __name__ == "__main__":
    main()
