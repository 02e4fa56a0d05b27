# Peer of bench/bench_generate.c: the same GPT (vocabulary 256, 4 pre-norm
# layers, d 256, 4 heads, feed-forward 1024, GELU), its weights read from the
# safetensors file bench_generate wrote ($OAR_BENCH_GENERATE_WEIGHTS, default
# /tmp/oar-bench-generate.safetensors; parsed here: no safetensors package),
# decoding greedily with a KV cache (preallocated [N, H, capacity, D] per
# layer, written in place) 96 tokens after the same 32-token prompt, at
# batch 1 and 8, under torch.no_grad on 2 threads as oar runs (OMP_NUM_THREADS,
# when set, gives the count to both). Same figures:
# prefill, and time per token of the single-token steps (medians of 5 runs).
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F

VOCAB, LAYERS, D, HEADS, CTX, PROMPT, NEW, RUNS = 256, 4, 256, 4, 256, 32, 96, 5
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or 2))


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    dt = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        out[name] = torch.frombuffer(bytearray(body[a:b]), dtype=dt[h["dtype"]]).reshape(h["shape"])
    return out


W = load_safetensors(os.environ.get("OAR_BENCH_GENERATE_WEIGHTS")
                     or "/tmp/oar-bench-generate.safetensors")


def ln(x, p):
    return F.layer_norm(x, (D,), W[p + ".weight"], W[p + ".bias"], 1e-5)


def forward_cached(idx, cache, pos):
    """idx [N, T] at slots [pos, pos + T) -> logits of the last position."""
    N, T = idx.shape
    x = F.embedding(idx, W["tok.weight"]) + W["pos.weight"][pos:pos + T]
    for i, (kc, vc) in enumerate(cache):
        p = f"layers.{i}."
        q, k, v = F.linear(ln(x, p + "norm1"), W[p + "self_attn.in_proj_weight"],
                           W[p + "self_attn.in_proj_bias"]).chunk(3, -1)
        split = lambda t: t.view(N, T, HEADS, D // HEADS).transpose(1, 2)
        kc[:, :, pos:pos + T] = split(k)
        vc[:, :, pos:pos + T] = split(v)
        s = split(q) @ kc[:, :, :pos + T].transpose(-2, -1) / math.sqrt(D // HEADS)
        if T > 1:
            keep = torch.arange(pos + T)[None, :] <= torch.arange(pos, pos + T)[:, None]
            s = s.masked_fill(~keep, float("-inf"))
        o = (torch.softmax(s, -1) @ vc[:, :, :pos + T]).transpose(1, 2).reshape(N, T, D)
        x = x + F.linear(o, W[p + "self_attn.out_proj.weight"], W[p + "self_attn.out_proj.bias"])
        h = F.gelu(F.linear(ln(x, p + "norm2"), W[p + "linear1.weight"], W[p + "linear1.bias"]))
        x = x + F.linear(h, W[p + "linear2.weight"], W[p + "linear2.bias"])
    return F.linear(ln(x[:, -1], "norm"), W["head.weight"], W["head.bias"])


def generate(batch, max_new):
    prompt = torch.tensor([[(i * 37 + 11) % VOCAB for i in range(PROMPT)]] * batch)
    cache = [[torch.zeros(batch, HEADS, PROMPT + NEW, D // HEADS) for _ in range(2)]
             for _ in range(LAYERS)]
    out, x, pos = [], prompt, 0
    for _ in range(max_new):
        nxt = torch.argmax(forward_cached(x, cache, pos), -1)
        pos += x.shape[1]
        out.append(nxt)
        x = nxt[:, None]
    return torch.stack(out, 1)


def timed(batch, max_new):
    t = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        toks = generate(batch, max_new)
        t.append(time.perf_counter() - t0)
    t.sort()
    return t[RUNS // 2], toks


with torch.no_grad():
    pre1, _ = timed(1, 1)
    pre8, _ = timed(8, 1)
    b1, toks = timed(1, NEW)
    b8, _ = timed(8, NEW)
print(f"torch prefill_b1_32 {pre1 * 1e3:.3f} ms")
print(f"torch decode_b1_per_token {(b1 - pre1) / (NEW - 1) * 1e3:.3f} ms")
print(f"torch decode_b8_per_token {(b8 - pre8) / (8 * (NEW - 1)) * 1e3:.3f} ms")
print(f"# torch tokens/s: batch 1 {NEW / b1:.0f}, batch 8 {8 * NEW / b8:.0f} (prefill included)")
print("# torch tokens " + " ".join(str(int(t)) for t in toks[0, :16]))
