#!/usr/bin/env bash
# Runs every benchmark under the shared peer environment, oar and its peer
# alternating in one command, and prints oar / peer ratios.
#   bash bench/run.sh [name ...]      (names without the bench_ prefix)
# Each bench/bench_<name> prints lines "oar <metric> <value> <unit>"; the peer
# bench/peer/<name>.py prints "torch <metric> <value> <unit>" (or "ort ..."
# for ONNX Runtime; the ratio lines name the peer). Lower is
# better for every unit we print (ns, ms, s); GFLOP/s lines carry their own
# ratio. Peer figures need PyTorch (/usr/bin/python3 with python3-torch;
# OAR_PEER_PYTHON names another interpreter, e.g. a venv with PyTorch 2 for
# compiled_step's torch.compile line). OAR_BENCH_ROUNDS: rounds (default 2).
# BUILD names the build folder (default build). Files a bench hands to its
# peer (generate's weights) go to a temporary folder removed on exit.
set -u
cd "$(dirname "$0")/.."
here=$(pwd)
shared=$here/../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
py=${OAR_PEER_PYTHON:-/usr/bin/python3}
build=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OAR_BENCH_GENERATE_WEIGHTS=${OAR_BENCH_GENERATE_WEIGHTS:-$tmp/generate.safetensors}
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$build"/bench_*; do names+=("$(basename "$f" | sed 's/^bench_//')"); done
fi
for name in "${names[@]}"; do
    bin=$build/bench_$name
    peer=bench/peer/$name.py
    [ -x "$bin" ] || { echo "no $bin (run make build, or set BUILD)"; continue; }
    echo "== $name"
    for round in $(seq "${OAR_BENCH_ROUNDS:-2}"); do
        oar_out=$("$bin")
        echo "$oar_out"
        if [ -f "$peer" ] && $py -c "import torch" 2>/dev/null; then
            peer_out=$($py "$peer")
            echo "$peer_out"
            # ratio for each metric both printed, named by the peer's first
            # word (torch, or ort for the ONNX Runtime peers)
            while read -r who metric value unit; do
                [ "$who" = oar ] || continue
                read -r pwho pv < <(echo "$peer_out" | awk -v m="$metric" '$2 == m {print $1, $3; exit}')
                [ -n "${pv:-}" ] && awk -v m="$metric" -v a="$value" -v b="$pv" -v p="$pwho" \
                    'BEGIN {printf "ratio %s oar/%s = %.3f (round '"$round"')\n", m, p, a / b}'
            done <<< "$oar_out"
        fi
    done
done
