#!/usr/bin/env bash
# bf16 AMP training against f32, oar and PyTorch in one command (issue 24,
# item 5): the char LM (examples/char_lm.c, OAR_EXAMPLE_AUTOCAST=bf16; its
# twin examples/ref/char_lm.py) and the demo CNN (examples/fashion_mnist.c,
# OAR_DEMO_AUTOCAST=bf16; its twin bench/peer/amp_cnn.py), each run in f32
# then bf16, alternating oar and torch, `rounds` times, under the shared
# benchmark environment. Prints ms per training step and the final metric
# (validation nats/char; test accuracy) of each run, then the bf16/f32 step
# time ratios. Needs a build with oneDNN (OAR_WITH_DNNL) for bf16 kernels.
#   bash bench/amp.sh [rounds]      (BUILD: build folder, default build)
# Environment: STEPS (char LM steps, 300), EPOCHS (CNN epochs, 1), LIMIT
# (CNN images, all).
set -u
cd "$(dirname "$0")/.."
shared=../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
py=${OAR_PEER_PYTHON:-/usr/bin/python3}
build=${BUILD:-build}
rounds=${1:-1}
text=$build/bible-kjv.txt
[ -f "$text" ] || bash scripts/bible-text.sh "$text" >/dev/null || exit 1
export OAR_EXAMPLE_STEPS=${STEPS:-300} OAR_EXAMPLE_SAMPLE=0 OAR_DEMO_EPOCHS=${EPOCHS:-1}
[ -n "${LIMIT:-}" ] && export OAR_DEMO_LIMIT=$LIMIT
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for round in $(seq "$rounds"); do
    for mode in f32 bf16; do
        ac=; [ $mode = bf16 ] && ac=bf16
        out=$(cd "$tmp" && OAR_EXAMPLE_AUTOCAST=$ac "$OLDPWD/$build/char_lm" "$OLDPWD/$text") || exit 1
        ms=$(echo "$out" | sed -n 's/^oar training .*(\([0-9.]*\) ms\/step)/\1/p')
        val=$(echo "$out" | sed -n 's/^validation loss: \([0-9.]*\).*/\1/p')
        echo "oar char_lm $mode ms/step $ms val_loss $val (round $round)"
        out=$(OAR_EXAMPLE_AUTOCAST=$ac OAR_EXAMPLE_THREADS=2 $py examples/ref/char_lm.py "$text") || exit 1
        ms=$(echo "$out" | sed -n 's/^torch training .*(\([0-9.]*\) ms\/step)/\1/p')
        val=$(echo "$out" | sed -n 's/^validation loss: \([0-9.]*\).*/\1/p')
        echo "torch char_lm $mode ms/step $ms val_loss $val (round $round)"
    done
    for mode in f32 bf16; do
        ac=; [ $mode = bf16 ] && ac=bf16
        out=$(cd "$tmp" && OAR_DEMO_AUTOCAST=$ac "$OLDPWD/$build/fashion_mnist") || exit 1
        # the training rate of each epoch's last step line (evaluation excluded)
        rate=$(echo "$out" | awk '/^epoch [0-9]+\/[0-9]+ step/ {split($4, s, "/"); if (s[1] == s[2]) {r += $7; n++}}
                                 END {if (n) printf "%.2f", 64 / (r / n) * 1e3}')
        acc=$(echo "$out" | sed -n 's/^test accuracy: //p')
        echo "oar cnn $mode ms/step $rate test_accuracy $acc (round $round)"
        $py bench/peer/amp_cnn.py $mode || exit 1
    done
done
