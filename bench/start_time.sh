#!/bin/bash
# Start-up cost of a small oar program against PyTorch's (issue 26):
#   bash bench/start_time.sh [PROG] [RUNS]
# PROG (default build/first_program: f(w) and its gradient, printed) runs
# RUNS times (default 40); prints the median wall time, the peak resident
# size (/usr/bin/time) and the libraries the dynamic loader initialised.
# The peer runs the same computation in Python with torch, under
# OAR_PEER_PYTHON (default /usr/bin/python3), when torch imports there.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../shared/bench/peer-env.sh" 2>/dev/null || . "$here/../shared/bench/peer-env.sh" 2>/dev/null || true
prog=${1:-$here/../build/first_program}
runs=${2:-40}
py=${OAR_PEER_PYTHON:-/usr/bin/python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# median_ms CMD...: the median wall time of RUNS runs, in ms
median_ms() {
    local ts=() s e
    for _ in $(seq "$runs"); do
        s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N)
        ts+=($(((e - s) / 1000)))
    done
    printf "%s\n" "${ts[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] / 1000}'
}
rss_kib() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -n 1; }
n_libs() { LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -c 'calling init'; }

[ -x "$prog" ] || { echo "start_time.sh: $prog is not built (make build)"; exit 1; }
oar_ms=$(median_ms "$prog")
echo "oar   $(basename "$prog"): median ${oar_ms} ms, peak RSS $(rss_kib "$prog") KiB, $(n_libs "$prog") libraries"
peer='import torch
w = torch.tensor([[0.5], [-1.0]], requires_grad=True)
x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
loss = ((x @ w) ** 2).mean(); loss.backward(); print(w.grad)'
if "$py" -c 'import torch' 2>/dev/null; then
    peer_ms=$(median_ms "$py" -c "$peer")
    echo "torch $py: median ${peer_ms} ms, peak RSS $(rss_kib "$py" -c "$peer") KiB"
    awk -v a="$oar_ms" -v b="$peer_ms" 'BEGIN {printf "ratio (torch / oar): %.1fx\n", b / a}'
else
    echo "torch: not importable by $py (set OAR_PEER_PYTHON): no peer figure"
fi
