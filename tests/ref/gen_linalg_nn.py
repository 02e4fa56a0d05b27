#!/usr/bin/python3
"""Writes tests/ref/linalg_nn_ref.h: inputs and PyTorch results for the
linear-algebra and nn tests (tests/ops/test_linalg.c, tests/ops/test_nn.c).

Run from the repo root: /usr/bin/python3 tests/ref/gen_linalg_nn.py
Deterministic (fixed seed); every array is float64 (complex ones as _re/_im
pairs), row-major."""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
out = []


def emit(name, t):
    a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if np.iscomplexobj(a):
        emit(name + "_re", a.real)
        emit(name + "_im", a.imag)
        return
    flat = a.astype(np.float64).reshape(-1)
    vals = ", ".join("%.17g" % v if np.isfinite(v) else ("NAN" if np.isnan(v) else ("INFINITY" if v > 0 else "-INFINITY")) for v in flat)
    out.append("static const double %s[%d] __attribute__((unused)) = {%s};" % (name, max(len(flat), 1), vals if len(flat) else "0"))


def rnd(*shape):
    return torch.randn(*shape, dtype=torch.float64).round(decimals=3)


# ---- matmul -------------------------------------------------------------------
A34, B45 = rnd(3, 4), rnd(4, 5)
emit("mm_a34", A34); emit("mm_b45", B45); emit("mm_ab", A34 @ B45)
v4, w4 = rnd(4), rnd(4)
emit("mm_v4", v4); emit("mm_w4", w4)
emit("mm_av", A34 @ v4)          # [3]
emit("mm_vb", v4 @ B45)          # [5]
emit("mm_vw", v4 @ w4)           # []
emit("mm_outer", torch.outer(v4, w4))
A2134, B342 = rnd(2, 1, 3, 4), rnd(3, 4, 2)
emit("mm_a2134", A2134); emit("mm_b342", B342); emit("mm_bcast", A2134 @ B342)  # [2,3,3,2]
B243 = rnd(2, 4, 3)
emit("mm_b243", B243); emit("mm_vB", v4 @ B243)   # [2,3]
A234 = rnd(2, 3, 4)
emit("mm_a234", A234); emit("mm_Av", A234 @ v4)   # [2,3]
emit("mm_fold", A234 @ B45)                        # [2,3,5]
At43 = rnd(4, 3)                                   # used as At43.T (non-contiguous)
emit("mm_at43", At43); emit("mm_atb", At43.T @ B45)
A38 = rnd(3, 8)                                    # used as A38[:, ::2]
emit("mm_a38", A38); emit("mm_sliceb", A38[:, ::2] @ B45)
B254 = rnd(2, 5, 4)                                # used as B254.transpose(1, 2)
emit("mm_b254", B254); emit("mm_bt", A234 @ B254.transpose(1, 2))  # [2,3,5]
Ac = torch.complex(rnd(2, 3), rnd(2, 3)); Bc = torch.complex(rnd(3, 2), rnd(3, 2))
emit("mm_ac", Ac); emit("mm_bc", Bc); emit("mm_c", Ac @ Bc)
Ai = torch.randint(-5, 6, (3, 4)); Bi = torch.randint(-5, 6, (4, 2))
emit("mm_ai", Ai); emit("mm_bi", Bi); emit("mm_i", Ai @ Bi)

# ---- einsum -------------------------------------------------------------------
E1, E2 = rnd(2, 2, 3), rnd(2, 3, 2)
emit("es_a", E1); emit("es_b", E2)
emit("es_bmm", torch.einsum("bij,bjk->bik", E1, E2))
S33 = rnd(3, 3)
emit("es_s", S33)
emit("es_diag", torch.einsum("ii->i", S33))
emit("es_trace", torch.einsum("ii->", S33))
emit("es_t", torch.einsum("ij->ji", A34))
emit("es_rowsum", torch.einsum("ij->i", A34))
emit("es_all", torch.einsum("bij->", E1))
emit("es_inner", torch.einsum("ij,ij->", A34, A34))
emit("es_outer", torch.einsum("i,j->ij", v4, w4))
C56 = rnd(5, 6)
emit("es_c56", C56)
emit("es_chain", torch.einsum("ij,jk,kl->il", A34, B45, C56))
emit("es_implicit", torch.einsum("ij,jk", A34, B45))
B32 = rnd(3, 2)
emit("es_b32", B32)
emit("es_ell", torch.einsum("...ij,jk->...ik", E1, B32))
Q, K = rnd(1, 2, 3, 4), rnd(1, 2, 5, 4)
emit("es_q", Q); emit("es_k", K)
emit("es_attn", torch.einsum("bhqd,bhkd->bhqk", Q, K))
emit("es_bcast", torch.einsum("ij,j->ij", A34, torch.ones(1, dtype=torch.float64) * 2))

# ---- softmax ------------------------------------------------------------------
X = rnd(3, 4)
X[1] = X[1] * 1000 + 500         # large values: stability
X[2, 1] = -1e4
emit("sm_x", X)
emit("sm_d1", torch.softmax(X, 1)); emit("sm_d0", torch.softmax(X, 0))
emit("lsm_d1", torch.log_softmax(X, 1)); emit("lsm_d0", torch.log_softmax(X, 0))
X3 = rnd(2, 3, 4)
emit("sm_x3", X3); emit("sm3_d1", torch.softmax(X3, 1)); emit("lsm3_d2", torch.log_softmax(X3, 2))

# ---- losses -------------------------------------------------------------------
L = rnd(4, 5) * 2
T = torch.tensor([1, -100, 4, 0])
W = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.25], dtype=torch.float64)
emit("ce_x", L); emit("ce_t", T); emit("ce_w", W)
red = ["none", "mean", "sum"]
for r in red:
    emit("ce_%s" % r, F.cross_entropy(L, T, reduction=r, ignore_index=-100))
    emit("ce_w_%s" % r, F.cross_entropy(L, T, weight=W, reduction=r))
    emit("ce_ls_%s" % r, F.cross_entropy(L, T, weight=W, reduction=r, label_smoothing=0.1))
    emit("ce_ls_nw_%s" % r, F.cross_entropy(L, T, reduction=r, label_smoothing=0.2))
    emit("nll_w_%s" % r, F.nll_loss(torch.log_softmax(L, 1), T, weight=W, reduction=r))
T2 = torch.tensor([1, 3, 4, 3])
emit("ce_t2", T2)
emit("ce_ign3_mean", F.cross_entropy(L, T2, weight=W, ignore_index=3))
L3 = rnd(2, 3, 4)
T3 = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]])
emit("ce3_x", L3); emit("ce3_t", T3)
emit("ce3_mean", F.cross_entropy(L3, T3)); emit("ce3_none", F.cross_entropy(L3, T3, reduction="none"))
P = torch.softmax(rnd(4, 5), 1)
emit("ce_p", P)
for r in red:
    emit("ce_p_%s" % r, F.cross_entropy(L, P, reduction=r))
    emit("ce_pw_ls_%s" % r, F.cross_entropy(L, P, weight=W, reduction=r, label_smoothing=0.3))
emit("ce_1d", F.cross_entropy(L[0], T[0]))

I, Tr = rnd(2, 3), rnd(2, 3)
emit("rg_x", I); emit("rg_t", Tr)
for r in red:
    emit("mse_%s" % r, F.mse_loss(I, Tr, reduction=r))
    emit("l1_%s" % r, F.l1_loss(I, Tr, reduction=r))
    emit("sl1_%s" % r, F.smooth_l1_loss(I, Tr, reduction=r, beta=0.5))
emit("sl1_b0", F.smooth_l1_loss(I, Tr, reduction="none", beta=0.0))
BX = rnd(2, 3) * 10
BT = torch.tensor([[0, 1, 0.3], [1, 0, 0.5]], dtype=torch.float64)
BW = torch.tensor([0.5, 2, 1], dtype=torch.float64)
BP = torch.tensor([3.0, 0.5, 1], dtype=torch.float64)
emit("bce_x", BX); emit("bce_t", BT); emit("bce_w", BW); emit("bce_pw", BP)
for r in red:
    emit("bce_%s" % r, F.binary_cross_entropy_with_logits(BX, BT, reduction=r))
    emit("bce_wp_%s" % r, F.binary_cross_entropy_with_logits(BX, BT, weight=BW, pos_weight=BP, reduction=r))

# ---- attention (PyTorch's math definition) -------------------------------------
def sdpa(q, k, v, mask=None, causal=False, scale=None):
    s = scale if scale else 1 / math.sqrt(q.shape[-1])
    a = q @ k.transpose(-2, -1) * s
    if causal:
        m = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        a = a.masked_fill(~m, float("-inf"))
    elif mask is not None and mask.dtype == torch.bool:
        a = a.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        a = a + mask
    return torch.softmax(a, -1) @ v

q, k, v = rnd(2, 3, 4), rnd(2, 5, 4), rnd(2, 5, 6)
bm = torch.rand(3, 5) > 0.3
bm[:, 0] = True
fm = rnd(3, 5)
emit("at_q", q); emit("at_k", k); emit("at_v", v); emit("at_bm", bm); emit("at_fm", fm)
emit("at_plain", sdpa(q, k, v))
emit("at_scale", sdpa(q, k, v, scale=0.3))
emit("at_bool", sdpa(q, k, v, bm))
emit("at_float", sdpa(q, k, v, fm))
k4, v4_ = k[:, :3], v[:, :3]
emit("at_causal", sdpa(q, k4, v4_, causal=True))

# ---- appended cases (after every draw above, so earlier values stay put) --------
EA, EB = rnd(2, 1, 2, 3), rnd(3, 3, 2)
emit("es_ea", EA); emit("es_eb", EB)
emit("es_ell2", torch.einsum("...ij,...jk->...ik", EA, EB))      # [2, 3, 2, 2]
emit("es_ell_sum", torch.einsum("...ij,...jk->ik", EA, EB))      # ellipsis dims summed
emit("es_imp_b", torch.einsum("bij,bjk", E1, E2))                 # b repeated: summed

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "linalg_nn_ref.h"), "w") as f:
    f.write("/* Generated by tests/ref/gen_linalg_nn.py (PyTorch %s); do not edit. */\n" % torch.__version__)
    f.write("#ifndef LINALG_NN_REF_H\n#define LINALG_NN_REF_H\n#include <math.h>\n\n")
    f.write("\n".join(out))
    f.write("\n\n#endif\n")
