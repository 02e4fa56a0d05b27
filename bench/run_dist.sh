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
# one layer), and the step time; then the PyTorch peer (bench/peer/zero.py:
# DDP + Adam, DDP + ZeroRedundancyOptimizer, FSDP, gloo; FSDP prints why
# when it cannot run) on the same model and ranks. BUILD names the build
# folder (default build).
#   bash bench/run_dist.sh zero [steps]
# With "pipeline" first, it measures pipeline parallelism: bench_pipeline
# (8 blocks Linear 256 x 256 + tanh, a batch of 64, SGD) on 1 rank (the
# whole model: the baseline), then cut into 2 and 4 stages on 2 and 4 ranks
# under GPipe and 1F1B for m = 1, 2, 4, 8 micro-batches: each stage's busy
# time and bubble against (p - 1)/(m + p - 1), and the throughput against
# 1 rank's. The ranks are oversubscribed where they outnumber the cores.
#   bash bench/run_dist.sh pipeline [steps]
set -u
cd "$(dirname "$0")/.."
shared=../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${1:-}" = zero ]; then
    steps=${2:-10}
    for np in 2 4; do
        for mode in dp zero1 zero2 zero3; do
            mpirun -np "$np" --oversubscribe "${BUILD:-build}/bench_zero" "$steps" "$mode" || exit 1
        done
        for mode in ddp zero1 fsdp; do
            /usr/bin/python3 bench/peer/zero.py "$np" "$steps" "$mode" || exit 1
        done
    done
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
