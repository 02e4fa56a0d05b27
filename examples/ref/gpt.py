#!/usr/bin/python3
"""The PyTorch twin of examples/gpt.c: the same GPT-style character model
(token and learned position embeddings, OAR_GPT_LAYERS (6) pre-norm causal
nn.TransformerEncoderLayer blocks of width OAR_GPT_D (128), OAR_GPT_HEADS (4)
heads, feed-forward 4 x d, GELU, final LayerNorm, linear head, context
OAR_GPT_CONTEXT (64)), PyTorch's default initialisation, the same training
windows in the same order (splitmix64 from seed 1234), the same AdamW
schedule, clipping at 1, and the same validation windows. Then it samples
through a KV cache written by hand (nn.TransformerEncoderLayer has none)
with the same filters as oar_generate: temperature, top-k, top-p, a
splitmix64 stream per context.

    /usr/bin/python3 examples/ref/gpt.py [text-file]

Environment as for the C example (OAR_EXAMPLE_STEPS (300), _BATCH (16),
_EVAL (128), _SAMPLE (300), _LR (2e-3), OAR_GPT_TEMPERATURE (0.8),
OAR_GPT_TOP_K (0), OAR_GPT_TOP_P (0.95), OAR_GPT_SEED (99)) and
OAR_EXAMPLE_THREADS (torch threads, 1)."""
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def env(name, default):
    v = os.environ.get(name)
    return type(default)(v) if v else default


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, T):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(T, d)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        L = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(L))
        mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        return self.head(self.norm(x))

    def forward_cached(self, idx, cache, pos):
        """idx [N, T] at slots [pos, pos + T); cache: per layer [k, v] tensors
        [N, H, capacity, D] filled in place."""
        N, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(pos, pos + T))
        for layer, (kc, vc) in zip(self.layers, cache):
            sa = layer.self_attn
            h = layer.norm1(x)
            q, k, v = F.linear(h, sa.in_proj_weight, sa.in_proj_bias).chunk(3, -1)
            E = q.shape[-1]
            split = lambda t: t.view(N, T, self.heads, E // self.heads).transpose(1, 2)
            kc[:, :, pos:pos + T] = split(k)
            vc[:, :, pos:pos + T] = split(v)
            o = F.scaled_dot_product_attention(split(q), kc[:, :, :pos + T], vc[:, :, :pos + T],
                                               is_causal=T > 1 and pos == 0) \
                if hasattr(F, "scaled_dot_product_attention") else \
                attention(split(q), kc[:, :, :pos + T], vc[:, :, :pos + T], pos)
            x = x + sa.out_proj(o.transpose(1, 2).reshape(N, T, E))
            x = x + layer.linear2(F.gelu(layer.linear1(layer.norm2(x))))
        return self.head(self.norm(x))


def attention(q, k, v, pos):
    """Causal attention of queries at slots [pos, pos + T) (PyTorch 1.13 has
    no F.scaled_dot_product_attention)."""
    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if T > 1:
        keep = torch.arange(S)[None, :] <= torch.arange(pos, pos + T)[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, -1) @ v


def pick(logits, temperature, top_k, top_p, rng):
    """oar_sample_token's rule: temperature, top-k, top-p (ties: lower id
    first), one splitmix64 draw walking the kept tokens."""
    if temperature == 0:
        return int(torch.argmax(logits))
    vals, ids = torch.sort(logits.double(), descending=True, stable=True)
    k = top_k if 0 < top_k < len(ids) else len(ids)
    p = torch.softmax((vals[:k] - vals[0]) / temperature, -1)
    if top_p < 1:
        cum = torch.cumsum(p, 0)
        m = int((cum < top_p).sum()) + 1
        p = p[:m] / cum[m - 1]
    u = (rng.next() >> 11) / float(1 << 53)
    acc = 0.0
    for i, pi in enumerate(p.tolist()):
        acc += pi
        if u < acc:
            return int(ids[i])
    return int(ids[len(p) - 1])


def lr_at(step, steps, lr_max):
    warm = max(1, min(20, steps // 10))
    if step < warm:
        return lr_max * (step + 1) / warm
    lo = lr_max / 10
    return lo + 0.5 * (lr_max - lo) * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OAR_TEXT", "bible-kjv.txt")
    steps, batch = env("OAR_EXAMPLE_STEPS", 300), env("OAR_EXAMPLE_BATCH", 16)
    n_eval, n_sample = env("OAR_EXAMPLE_EVAL", 128), env("OAR_EXAMPLE_SAMPLE", 300)
    lr_max = env("OAR_EXAMPLE_LR", 2e-3)
    layers, d = env("OAR_GPT_LAYERS", 6), env("OAR_GPT_D", 128)
    heads, T = env("OAR_GPT_HEADS", 4), env("OAR_GPT_CONTEXT", 64)
    torch.set_num_threads(env("OAR_EXAMPLE_THREADS", 1))
    data = open(path, "rb").read()
    chars = sorted(set(data))
    code = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([code[c] for c in data], dtype=torch.long)
    n_train = len(data) * 9 // 10
    n_val = len(data) - n_train
    torch.manual_seed(0)
    model = GPT(len(chars), d, heads, layers, T)
    opt = torch.optim.AdamW(model.parameters(), lr=lr_max, weight_decay=0.01)
    print(f"torch gpt: {len(data)} characters ({len(chars)} distinct), {layers} layers, d {d}, "
          f"{heads} heads, {sum(p.numel() for p in model.parameters())} parameters, "
          f"{steps} steps of {batch} x {T}")
    rng = SplitMix64(1234)
    t0 = time.perf_counter()
    for step in range(steps):
        offs = [rng.next() % (n_train - T - 1) for _ in range(batch)]
        x = torch.stack([ids[o:o + T] for o in offs])
        y = torch.stack([ids[o + 1:o + T + 1] for o in offs])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr_max)
        loss = F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} "
                  f"({(time.perf_counter() - t0) / (step + 1) * 1e3:.0f} ms/step)", flush=True)
    train_s = time.perf_counter() - t0

    model.eval()
    stride = (n_val - T - 1) // n_eval
    total = 0.0
    with torch.no_grad():
        for k in range(0, n_eval, 32):
            offs = [n_train + j * stride for j in range(k, min(n_eval, k + 32))]
            x = torch.stack([ids[o:o + T] for o in offs])
            y = torch.stack([ids[o + 1:o + T + 1] for o in offs])
            total += F.cross_entropy(model(x).reshape(-1, len(chars)), y.reshape(-1),
                                     reduction="sum").item()
        val = total / (n_eval * T)
        # sampling through the KV cache, one context at a time as gpt.c does
        temp, top_k = env("OAR_GPT_TEMPERATURE", 0.8), env("OAR_GPT_TOP_K", 0)
        top_p, seed = env("OAR_GPT_TOP_P", 0.95), env("OAR_GPT_SEED", 99)
        out = list(b"And God said")
        t1 = time.perf_counter()
        done, rnd = 0, 0
        while done < n_sample:
            prompt = [code[c] for c in out[-(T // 2):]]
            m = min(n_sample - done, T - len(prompt) + 1)
            cache = [[torch.zeros(1, heads, T, d // heads) for _ in range(2)] for _ in range(layers)]
            srng = SplitMix64(seed + rnd)
            x, pos = torch.tensor([prompt]), 0
            for _ in range(m):
                logits = model.forward_cached(x, cache, pos)[0, -1]
                pos += x.shape[1]
                t = pick(logits, temp, top_k, top_p, srng)
                out.append(chars[t])
                x = torch.tensor([[t]])
            done += m
            rnd += 1
        sample_s = time.perf_counter() - t1
    print("sample:\n" + bytes(out).decode("ascii", "replace"))
    print(f"torch sampling {n_sample} characters in {sample_s:.2f} s "
          f"({n_sample / max(sample_s, 1e-9):.0f} tokens/s, KV cache)")
    print(f"torch training {train_s:.1f} s ({train_s / steps * 1e3:.0f} ms/step)")
    print(f"validation loss: {val:.4f} nats/char")


if __name__ == "__main__":
    main()
