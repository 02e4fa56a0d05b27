#!/usr/bin/env python3
"""A plain Python/NumPy safetensors reader, independent of oar, used by
tests/io/test_safetensors.c to cross-check files oar writes.

    python3 read_safetensors.py FILE

Validates the layout (header length, JSON, offsets that tile the data
section exactly) and prints one line per tensor:

    name DTYPE [d0,d1,...] v0 v1 ...      (values as %.17g; complex: re im)

oar writes complex tensors as F32/F64 with a trailing dim of 2 (and an
"oar.dtype.<name>" metadata entry), so they print here as float arrays of
that shape, re im interleaved; C64/C128 entries (older oar files) print as
complex.

Exits 1 with a message on stderr if the file is malformed."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I32": np.int32,
          "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_, "C64": np.complex64,
          "C128": np.complex128, "BF16": None}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("header length %d exceeds the file" % n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    out, spans = [], []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt = e["dtype"]
        shape = tuple(e["shape"])
        b, en = e["data_offsets"]
        spans.append((b, en))
        raw = body[b:en]
        if len(raw) != en - b:
            raise ValueError("%s: data beyond the end of the file" % name)
        if dt == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(DTYPES[dt]).newbyteorder("<")).reshape(shape)
        out.append((name, dt, shape, arr))
    spans.sort()
    pos = 0
    for b, en in spans:
        if b != pos:
            raise ValueError("data offsets leave a gap or overlap at byte %d" % b)
        pos = en
    if pos != len(body):
        raise ValueError("data section has %d bytes, tensors cover %d" % (len(body), pos))
    return out


def main():
    try:
        tensors = read(sys.argv[1])
    except Exception as exc:  # report any malformation as a failure
        print("read_safetensors: %s" % exc, file=sys.stderr)
        return 1
    for name, dt, shape, arr in tensors:
        flat = arr.reshape(-1)
        if np.iscomplexobj(flat):
            vals = " ".join("%.17g %.17g" % (v.real, v.imag) for v in flat)
        else:
            vals = " ".join("%.17g" % float(v) for v in flat)
        print("%s %s [%s] %s" % (name, dt, ",".join(str(d) for d in shape), vals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
