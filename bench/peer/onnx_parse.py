# Peer of bench/bench_onnx_parse.c: onnx.load_model_from_string of the 932
# ONNX backend node models (read into memory first), best of 5 rounds.
import glob
import time

import onnx

paths = sorted(glob.glob("/usr/share/libonnx-testdata/data/node/test_*/model.onnx"))
bufs = [open(p, "rb").read() for p in paths]
best = 1e30
for _ in range(5):
    t0 = time.perf_counter()
    for b in bufs:
        onnx.load_model_from_string(b)
    best = min(best, time.perf_counter() - t0)
print("onnx onnx_parse_ms %.3f ms" % (best * 1e3))
