#!/usr/bin/env bash
# Imported ONNX models through oar's predictor (compiled, 2 threads) against
# ONNX Runtime (2 intra-op threads) and PyTorch (2 threads), in one run:
# ResNet-18 with random weights and a TransformerEncoderLayer (d 256, T 64),
# latency at batch 1 (mean ms) and throughput at batch 32 (samples/s). oar
# runs each model twice: as served ("oar") and with the predictor's
# prepack_conv pass off ("oar-noprepack", OAR_PREPACK_CONV=0), an A/B in the
# same run.
#   bash bench/onnx_models.sh PYTHON_WITH_ONNXRUNTIME
# The models are exported by $OAR_EXPORT_PYTHON (a Python with PyTorch; torch 2
# also needs onnxscript; default /usr/bin/python3) into
# $OAR_ONNX_BENCH_DIR (default /tmp/oar-onnx-models); where that Python has no
# PyTorch, ResNet-18 alone is written by ONNX Runtime's Python with the onnx
# package (the same layers, batch norm folded as PyTorch's export does) and
# the encoder rows are skipped. ONNX Runtime comes from PyPI
# (python -m venv V && V/bin/pip install onnxruntime onnx numpy).
set -eu
cd "$(dirname "$0")/.."
shared=../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
ort_py=${1:?usage: bash bench/onnx_models.sh PYTHON_WITH_ONNXRUNTIME}
dir=${OAR_ONNX_BENCH_DIR:-/tmp/oar-onnx-models}
export_py=${OAR_EXPORT_PYTHON:-/usr/bin/python3}
if "$export_py" -c "import torch" 2>/dev/null; then
    "$export_py" bench/peer/onnx_models.py export "$dir"
else
    echo "# $export_py has no PyTorch: ResNet-18 from the onnx package, no encoder"
    "$ort_py" bench/peer/onnx_models.py export-onnx "$dir"
fi
for name in resnet18 encoder; do
    for batch in 1 32; do
        model=$dir/resnet18.onnx
        [ "$name" = encoder ] && model=$dir/encoder_b$batch.onnx
        [ -f "$model" ] || continue
        iters=30; [ "$batch" = 32 ] && iters=5
        for who in oar oar-noprepack; do
            pp=1; [ "$who" = oar-noprepack ] && pp=0
            out=$(OAR_PREPACK_CONV=$pp ./build/oar bench "$model" --batch "$batch" --iters "$iters" --warmup 2 --threads 2)
            if [ "$batch" = 1 ]; then
                echo "$out" | awk -v w="$who" -v n="$name" '/^latency/ {print w " " n "_b1 " $4 " ms"}'
            else
                echo "$out" | awk -v w="$who" -v n="$name" -v b="$batch" \
                    '/^throughput/ {print w " " n "_b" b " " $2 " samples/s"}'
            fi
        done
        echo "$out" | grep -o "compiled\|unfused" | head -1 | sed 's/^/# oar predictor: /'
        "$ort_py" bench/peer/onnx_models.py run "$dir" "$name" "$batch"
    done
done
