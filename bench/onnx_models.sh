#!/usr/bin/env bash
# Imported ONNX models through oar's predictor (compiled, 2 threads) against
# ONNX Runtime (2 intra-op threads) and PyTorch (2 threads), in one run:
# ResNet-18 with random weights and a TransformerEncoderLayer (d 256, T 64),
# latency at batch 1 (mean ms) and throughput at batch 32 (samples/s).
#   bash bench/onnx_models.sh PYTHON_WITH_ONNXRUNTIME
# The models are exported by $OAR_EXPORT_PYTHON (a Python with PyTorch; torch 2
# also needs onnxscript; default /usr/bin/python3) into
# $OAR_ONNX_BENCH_DIR (default /tmp/oar-onnx-models); ONNX Runtime comes from
# PyPI (python -m venv V && V/bin/pip install onnxruntime numpy).
set -eu
cd "$(dirname "$0")/.."
shared=../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
ort_py=${1:?usage: bash bench/onnx_models.sh PYTHON_WITH_ONNXRUNTIME}
dir=${OAR_ONNX_BENCH_DIR:-/tmp/oar-onnx-models}
"${OAR_EXPORT_PYTHON:-/usr/bin/python3}" bench/peer/onnx_models.py export "$dir"
for name in resnet18 encoder; do
    for batch in 1 32; do
        model=$dir/resnet18.onnx
        [ "$name" = encoder ] && model=$dir/encoder_b$batch.onnx
        iters=30; [ "$batch" = 32 ] && iters=5
        out=$(./build/oar bench "$model" --batch "$batch" --iters "$iters" --warmup 2 --threads 2)
        if [ "$batch" = 1 ]; then
            echo "$out" | awk -v n="$name" '/^latency/ {print "oar " n "_b1 " $4 " ms"}'
        else
            echo "$out" | awk -v n="$name" -v b="$batch" '/^throughput/ {print "oar " n "_b" b " " $2 " samples/s"}'
        fi
        echo "$out" | grep -o "compiled\|unfused" | head -1 | sed 's/^/# oar predictor: /'
        "$ort_py" bench/peer/onnx_models.py run "$dir" "$name" "$batch"
    done
done
