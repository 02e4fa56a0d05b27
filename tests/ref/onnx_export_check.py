#!/usr/bin/env python3
"""Checks ONNX files exported by oar (oar_onnx_export) with the ONNX tools.

For each MODEL.onnx in the given folders (or each file given) it runs
onnx.checker.check_model (full_check: shape inference too) and, when
MODEL.in<i>.npy inputs and MODEL.out<j>.npy outputs (oar's own results) lie
next to it, runs the model in ONNX Runtime on those inputs and compares each
output with oar's: same shape, max |diff| <= atol + rtol * |oar| (1e-4 each;
booleans and integers exactly). Prints one line per model, exits non-zero on
any failure.

How to produce the files (make test never needs Python):

    OAR_ONNX_EXPORT_DIR=/tmp/oar_onnx build/test_onnx_export   (run from tests/)
    python3 tests/ref/onnx_export_check.py /tmp/oar_onnx

and for the demo: `make demo` writes demo-out/fashion-cnn.onnx (no .npy
there: checker only), or `build/oar export MODEL_DIR out.onnx --opset 13`.

Needs onnx and numpy (Debian: python3-onnx, which deps.sh installs); with
onnxruntime importable too (pip install onnxruntime) it also runs the models.
CTest's test_onnx_export_checker runs it under /usr/bin/python3, checker only
when ONNX Runtime is absent.
"""
import glob
import os
import sys

import numpy as np
import onnx

try:
    import onnxruntime as ort
except ImportError:  # checker only
    ort = None


def check(path, rtol=1e-4, atol=1e-4):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
    base = path[: -len(".onnx")]
    inputs = sorted(glob.glob(base + ".in*.npy"), key=lambda p: int(p.rsplit(".in", 1)[1][:-4]))
    outputs = sorted(glob.glob(base + ".out*.npy"), key=lambda p: int(p.rsplit(".out", 1)[1][:-4]))
    nodes = len(model.graph.node)
    if not outputs or ort is None:
        why = "no reference outputs" if not outputs else "no onnxruntime"
        return True, f"checker ok (opset {opset}, {nodes} nodes; {why})"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.load(p) for i, p in zip(sess.get_inputs(), inputs)}
    got = sess.run(None, feeds)
    worst, bad = 0.0, []
    for o, ref_path, g in zip(sess.get_outputs(), outputs, got):
        want = np.load(ref_path)
        if g.shape != want.shape:
            bad.append(f"{o.name}: shape {g.shape} vs oar {want.shape}")
            continue
        if want.dtype.kind in "biu":
            if not np.array_equal(g.astype(want.dtype), want):
                bad.append(f"{o.name}: {int(np.sum(g.astype(want.dtype) != want))} elements differ")
            continue
        g64, w64 = g.astype(np.float64), want.astype(np.float64)
        diff = np.abs(g64 - w64)
        worst = max(worst, float(diff.max()) if diff.size else 0.0)
        if not np.all(diff <= atol + rtol * np.abs(w64)):
            bad.append(f"{o.name}: max |diff| {diff.max():.3g}")
    if len(got) != len(outputs):
        bad.append(f"{len(got)} outputs vs {len(outputs)} reference files")
    msg = f"opset {opset}, {nodes} nodes, {len(got)} outputs, max |diff| {worst:.2e}"
    return not bad, msg + ("; " + "; ".join(bad) if bad else "")


def main(argv):
    paths = []
    for a in argv or ["."]:
        paths += sorted(glob.glob(os.path.join(a, "*.onnx"))) if os.path.isdir(a) else [a]
    if not paths:
        print("no .onnx files found")
        return 1
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__ if ort else 'absent: checker only'}")
    failed = 0
    for p in paths:
        try:
            ok, msg = check(p)
        except Exception as e:  # checker or runtime refusal: report and go on
            ok, msg = False, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(p)}: {msg}")
    print(f"{len(paths) - failed} of {len(paths)} models pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
