#!/usr/bin/env bash
# Data-parallel throughput: bench_dist on 1 rank, on 2 ranks with gradients
# reduced after backward ("sync"), and on 2 ranks with buckets overlapped
# with backward (1 OpenMP thread per rank), alternating, `rounds` times,
# under the shared benchmark environment. Prints each run, the 2-rank /
# 1-rank throughput ratio of each round (target >= 1.8) and the medians.
# With PER_RANK=B in the environment every run takes B sequences per rank
# (weak scaling: the global batch is B x ranks) instead of one global batch
# of 16 split over the ranks (strong scaling, the default).
#   bash bench/run_dist.sh [steps] [rounds]
# With "zero" first, it measures ZeRO instead: bench_zero (an MLP of 1 M
# f32 parameters, Adam) in plain data parallel, ZeRO-1, ZeRO-2 and ZeRO-3
# on 2 and 4 ranks, each rank's peak tensor bytes, optimizer state and
# parameter bytes against their theory (1/N; ZeRO-3's parameters 1/N plus
# one layer), and the step time; each followed by its PyTorch peer
# (bench/peer/zero.py, gloo) on the same model and ranks: dp by DDP + Adam,
# zero1 by DDP + ZeroRedundancyOptimizer, zero2 by FSDP SHARD_GRAD_OP,
# zero3 by FSDP FULL_SHARD (FSDP2's fully_shard on the CPU; the peer prints
# why when it cannot run), and the oar / torch step-time ratio. The peer's
# Python is OAR_PEER_PYTHON (default /usr/bin/python3; FSDP needs torch 2).
# BUILD names the build folder (default build).
#   OAR_PEER_PYTHON=/path/to/python bash bench/run_dist.sh zero [steps]
# With "plan" first, it runs bench_plan measure (the planner's predicted
# step times against measured ones, bench/RESULTS.md) at 2 and then 4
# ranks, `rounds` (5) rounds each, and prints the load average around them.
#   [BENCH_PLAN_RT=1] bash bench/run_dist.sh plan [rounds]
# With "pipeline" first, it measures pipeline parallelism: bench_pipeline
# (8 blocks Linear 256 x 256 + tanh, a batch of 64, SGD) on 1 rank (the
# whole model: the baseline), then cut into 2 and 4 stages on 2 and 4 ranks
# under GPipe and 1F1B for m = 1, 2, 4, 8 micro-batches: each stage's busy
# time and bubble against (p - 1)/(m + p - 1), and the throughput against
# 1 rank's. The ranks are oversubscribed where they outnumber the cores.
#   bash bench/run_dist.sh pipeline [steps]
# With "gpt" first, it trains the GPT-style transformer of
# tests/dist/test_dist_gpt.c at the issue's size (4 layers, d 256, 8 heads,
# vocab 256, 16 sequences of 32 tokens, SGD with momentum, f32) for `steps`
# steps (20) under every strategy (dp, tp, pp GPipe and 1F1B, zero1-3, dp x
# tp, dp x pp, tp x pp, dp x tp x pp) on 1, 2, 4 and 8 ranks, and prints for
# each the largest relative loss difference against one process (trained on
# rank 0 in the same run) and the step times. Ranks beyond the cores are
# oversubscribed. Exits non-zero if a difference exceeds 1e-5.
#   bash bench/run_dist.sh gpt [steps]
set -u
cd "$(dirname "$0")/.."
shared=../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${1:-}" = zero ]; then
    steps=${2:-10}
    py=${OAR_PEER_PYTHON:-/usr/bin/python3}
    ms() { echo "$1" | awk '$2 ~ /_step_ms$/ {print $3}'; }
    for np in 2 4; do
        for pair in "dp ddp" "zero1 zero1" "zero2 fsdp_grad_op" "zero3 fsdp"; do
            read -r om tm <<< "$pair"
            o=$(mpirun -np "$np" --oversubscribe "${BUILD:-build}/bench_zero" "$steps" "$om") || exit 1
            t=$("$py" bench/peer/zero.py "$np" "$steps" "$tm" 2>/dev/null) || exit 1
            echo "$o"
            echo "$t"
            a=$(ms "$o") b=$(ms "$t")
            [ -n "$a" ] && [ -n "$b" ] &&
                awk -v a="$a" -v b="$b" -v o="$om" -v t="$tm" -v n="$np" \
                    'BEGIN {printf "ratio np%d step time oar %s / torch %s: %.2f\n", n, o, t, a / b}'
        done
    done
    exit 0
fi
if [ "${1:-}" = gpt ]; then
    steps=${2:-20}
    rc=0
    for s in dp tp pp zero1 zero2 zero3 dp_tp dp_pp tp_pp dp_tp_pp; do
        for np in 1 2 4 8; do
            out=$(mpirun -np "$np" --oversubscribe "${BUILD:-build}/test_dist_gpt" "$s" --bench --layers 4 \
                --d 256 --heads 8 --vocab 256 --seq 32 --batch 16 --steps "$steps" 2>&1) || rc=1
            echo "$out" | grep -v ' passed, 0 failed$'
        done
    done
    exit $rc
fi
if [ "${1:-}" = plan ]; then
    # the planner against measurement (issue 23, item 3): bench_plan measure at 2 then 4 ranks,
    # `rounds` rounds of (calibrate, measure every plan), the load average before, between and after
    # BENCH_PLAN_RT=1 runs the ranks at real-time priority (chrt -f 20; root), so that other
    # processes on a shared host do not preempt them: at 2 ranks the figures are then clean
    # even at load 3-4; at 4 ranks (2 a core) it changes how core-mates interleave, not better
    export BENCH_PLAN_ROUNDS=${2:-5}
    rt=()
    [ "${BENCH_PLAN_RT:-0}" = 1 ] && rt=(chrt -f 20)
    for np in 2 4; do
        echo "== $(date -u +%H:%M:%S) UTC, np $np, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
        "${rt[@]}" mpirun -np "$np" --oversubscribe --mca mpi_yield_when_idle 1 "${BUILD:-build}/bench_plan" measure || exit 1
    done
    echo "== $(date -u +%H:%M:%S) UTC, done, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi
if [ "${1:-}" = pipeline ]; then
    steps=${2:-10}
    base=$("${BUILD:-build}/bench_pipeline" "$steps" 1) || exit 1
    echo "$base"
    one=$(echo "$base" | awk '/p=1 m=1 /{for (i = 1; i <= NF; i++) if ($i == "samples/s") print $(i - 1)}')
    for np in 2 4; do
        mpirun -np "$np" --oversubscribe "${BUILD:-build}/bench_pipeline" "$steps" 1 2 4 8 |
            awk -v one="$one" '{for (i = 1; i <= NF; i++) if ($i == "samples/s") r = $(i - 1) / one;
                                print $0 sprintf("  x%.2f of 1 rank", r)}' || exit 1
    done
    exit 0
fi
steps=${1:-10}
rounds=${2:-2}
[ -n "${PER_RANK:-}" ] && export OAR_BENCH_PER_RANK_BATCH=$PER_RANK
rs=() ro=()
for round in $(seq "$rounds"); do
    one=$(mpirun -np 1 build/bench_dist "$steps") || exit 1
    two=$(mpirun -np 2 --oversubscribe build/bench_dist "$steps" sync) || exit 1
    ovl=$(mpirun -np 2 --oversubscribe build/bench_dist "$steps") || exit 1
    echo "$one"
    echo "$two"
    echo "$ovl"
    a=$(echo "$one" | awk '$2 == "dp1_samples_per_s" {print $3}')
    b=$(echo "$two" | awk '$2 == "dpsync2_samples_per_s" {print $3}')
    c=$(echo "$ovl" | awk '$2 == "dp2_samples_per_s" {print $3}')
    r1=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b / a}')
    r2=$(awk -v a="$a" -v c="$c" 'BEGIN {printf "%.3f", c / a}')
    rs+=("$r1") ro+=("$r2")
    echo "ratio dp2/dp1 throughput: after backward $r1, overlapped $r2 (round $round)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "median ratio dp2/dp1 over $rounds rounds: after backward $(median "${rs[@]}"), overlapped $(median "${ro[@]}")"
