#!/bin/sh
# oar's ONNX exports judged by ONNX's own checker (full_check: shape
# inference too), not only by oar's importer:
#   sh tests/onnx/export_checker.sh BUILD/test_onnx_export   (run from tests/)
# test_onnx_export writes every model it exports (OAR_ONNX_EXPORT_DIR), and
# tests/ref/onnx_export_check.py checks each. The checker must also refuse a
# known-bad model, so a checker that accepts anything cannot pass this test.
# Skips (77) only where Debian's python3-onnx is not installed.
set -u
py=/usr/bin/python3
if ! "$py" -c 'import onnx, numpy' 2>/dev/null; then
    echo "skip: $py cannot import onnx and numpy (Debian: python3-onnx)"
    exit 77
fi
out=$(mktemp -d) || exit 1
trap 'rm -rf "$out"' EXIT
OAR_ONNX_EXPORT_DIR=$out "$1" >/dev/null || { echo "test_onnx_export failed"; exit 1; }
n=$(ls "$out"/*.onnx 2>/dev/null | wc -l)
[ "$n" -ge 30 ] || { echo "only $n exported models found in $out (expected >= 30)"; exit 1; }
"$py" ref/onnx_export_check.py "$out" || exit 1
if "$py" ref/onnx_export_check.py onnx/bad_shapes.onnx >/dev/null 2>&1; then
    echo "the checker accepted onnx/bad_shapes.onnx (Add of incompatible shapes)"
    exit 1
fi
echo "the checker refuses onnx/bad_shapes.onnx, as it must"
