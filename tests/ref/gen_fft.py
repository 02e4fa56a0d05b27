#!/usr/bin/python3
"""Writes tests/ref/fft_ref.h: inputs and numpy.fft results (complex128) for
tests/fft/test_fft.c. Every public fft function, every norm, n / s that keep,
crop and pad, dims in and out of order, lengths with prime and odd factors.
The C test runs each case in complex64 and complex128 and compares with
these values. Run from the repo root: /usr/bin/python3 tests/ref/gen_fft.py
(deterministic)."""
import os

import numpy as np

rng = np.random.default_rng(20261203)
NORMS = [None, "backward", "forward", "ortho"]
FNS = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2",
       "fftn", "ifftn", "rfftn", "irfftn", "fftshift", "ifftshift"]
REAL_IN = {"rfft", "ihfft", "rfft2", "rfftn", "fftshift", "ifftshift"}
# lengths: primes (small and above the radix limit), odd composites, powers of two
LENGTHS = [1, 2, 3, 5, 7, 8, 11, 12, 16, 17, 31, 37, 45, 64, 97, 100, 127, 243, 257, 1000, 1031]

cases = []
arrays = []


def arr(name, a):
    a = np.ascontiguousarray(a)
    if np.iscomplexobj(a):
        a = np.stack([a.real, a.imag], axis=-1)
    vals = ", ".join(repr(float(v)) for v in a.reshape(-1))
    arrays.append("static const double %s[] = {%s};" % (name, vals or "0"))


def rand(shape, cplx):
    x = rng.standard_normal(shape)
    if cplx:
        x = x + 1j * rng.standard_normal(shape)
    return x


def add(fn, x, norm, n=-1, dim=-1, s=None, dims=None):
    i = len(cases)
    if fn in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        y = getattr(np.fft, fn)(x, n=None if n == -1 else n, axis=dim, norm=norm)
    elif fn in ("fftshift", "ifftshift"):
        y = getattr(np.fft, fn)(x, axes=dims)
    else:
        kw = {"norm": norm}
        if s is not None:
            kw["s"] = s
        if dims is not None:
            kw["axes"] = dims
        y = getattr(np.fft, fn)(x, **kw)
    arr("fin%d" % i, x)
    arr("fout%d" % i, y)
    cases.append(dict(fn=fn, x=x, y=y, norm=norm, n=n, dim=dim, s=s, dims=dims, i=i))


# one-dim functions: every norm, lengths cycled, n keeps / crops / pads
k = 0
for fn in FNS[:6]:
    for rep in range(6):
        norm = NORMS[rep % 4]
        L = LENGTHS[k % len(LENGTHS)]
        k += 1
        cplx = fn not in REAL_IN
        along0 = k % 2 == 0
        b = 1 if L > 200 else 3
        shape = (L, b) if along0 else (b - 1 or 1, L)
        dim = 0 if along0 else -1
        mode = k % 3
        if fn in ("irfft", "hfft"):
            # input is a half spectrum of m = L//2 + 1 entries; n: default, crop, pad
            m = L // 2 + 1
            shape = (m, b) if along0 else (b - 1 or 1, m)
            n = [-1 if m > 1 else 1, m, 2 * m + 3][mode]
        else:
            n = [-1, max(1, (2 * L) // 3), L + 5][mode]
        add(fn, rand(shape, cplx), norm, n=n, dim=dim)

# two-dim functions
for fn in FNS[6:10]:
    for norm, (shape, s, dims) in zip(NORMS, [((3, 5, 6), None, None), ((7, 4), (5, 9), None),
                                              ((4, 2, 9), (3, 4), (2, 0)), ((13, 17, 2), None, (0, 1))]):
        cplx = fn not in REAL_IN
        add(fn, rand(shape, cplx), norm, s=s, dims=dims)

# n-dim functions: all dims, s without dims (the last len(s) dims), dims out of order
for fn in FNS[10:14]:
    for norm, (shape, s, dims) in zip(NORMS, [((3, 4, 5), None, None), ((2, 6, 7), (5, 3), None),
                                              ((5, 3, 4), (4, -1, 7), (2, 0, 1)), ((6, 37), None, (1,))]):
        cplx = fn not in REAL_IN
        if s is not None and -1 in s:
            # -1 in s keeps that size (numpy has no -1; torch does)
            np_s = [shape[d] if v == -1 else v for v, d in zip(s, dims)]
            x = rand(shape, cplx)
            y = getattr(np.fft, fn)(x, s=np_s, axes=dims, norm=norm)
            i = len(cases)
            arr("fin%d" % i, x)
            arr("fout%d" % i, y)
            cases.append(dict(fn=fn, x=x, y=y, norm=norm, n=-1, dim=-1, s=s, dims=dims, i=i))
        else:
            add(fn, rand(shape, cplx), norm, s=s, dims=dims)

for fn in FNS[14:]:
    for shape, dims in [((5, 4), None), ((3, 7, 2), (1,)), ((6,), (0,)), ((2, 5, 3), (2, 0))]:
        add(fn, rand(shape, False), None, dims=dims)


def c_list(v, n=4):
    v = list(v) if v is not None else []
    return "{" + ", ".join(str(int(a)) for a in v + [0] * (n - len(v))) + "}"


lines = []
for c in cases:
    x, y = c["x"], c["y"]
    lines.append(
        '    {"%s", %d, %s, %s, %d, %s, fin%d, %d, %s, %s, fout%d, %d, %d, %d, %s, %d, %s},' % (
            c["fn"], int(np.iscomplexobj(x)), '"%s"' % c["norm"] if c["norm"] else "NULL",
            c_list(x.shape), x.ndim, "0", c["i"],
            int(np.iscomplexobj(y)), c_list(y.shape), str(y.ndim), c["i"], c["n"], c["dim"],
            len(c["s"]) if c["s"] is not None else 0, c_list(c["s"]),
            len(c["dims"]) if c["dims"] is not None else 0, c_list(c["dims"])))

freqs = []
for n, d in [(1, 1.0), (8, 0.5), (9, 0.1), (10, 2.0)]:
    freqs.append("    {%d, %r, {%s}, {%s}}," % (
        n, d, ", ".join(repr(float(v)) for v in np.fft.fftfreq(n, d)),
        ", ".join(repr(float(v)) for v in np.fft.rfftfreq(n, d))))

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "fft_ref.h"), "w") as f:
    f.write("/* Generated by tests/ref/gen_fft.py (numpy %s); do not edit. */\n" % np.__version__)
    f.write("#ifndef FFT_REF_H\n#define FFT_REF_H\n#include <stddef.h>\n#include <stdint.h>\n\n")
    f.write("\n".join(arrays) + "\n\n")
    f.write("""/* One call: fn on input in (real or interleaved complex, shape in_shape)
 * with norm, and n/dim (one-dim functions) or s/dims (ns/nd entries). */
typedef struct fft_case {
    const char *fn;
    int in_complex;
    const char *norm;
    int64_t in_shape[4];
    int in_ndim;
    int unused;
    const double *in;
    int out_complex;
    int64_t out_shape[4];
    int out_ndim;
    const double *out;
    int64_t n;
    int dim;
    int ns;
    int64_t s[4];
    int nd;
    int64_t dims[4];
} fft_case;

static const fft_case fft_cases[] = {
""")
    f.write("\n".join(lines) + "\n};\n#define N_FFT_CASES %d\n\n" % len(cases))
    f.write("typedef struct { int64_t n; double d; double fftfreq[16]; double rfftfreq[16]; } fft_freq_case;\n")
    f.write("static const fft_freq_case fft_freq_cases[] = {\n" + "\n".join(freqs) + "\n};\n")
    f.write("\n#endif\n")
print("cases:", len(cases))
