#!/usr/bin/env bash
# Data-parallel throughput: bench_dist on 1 rank and on 2 ranks (1 OpenMP
# thread each), alternating, twice, under the shared benchmark environment.
# Prints each run and the 2-rank / 1-rank throughput ratio (target >= 1.8).
#   bash bench/run_dist.sh [steps]
set -u
cd "$(dirname "$0")/.."
shared=../shared/bench/peer-env.sh
[ -f "$shared" ] && . "$shared"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
steps=${1:-10}
for round in 1 2; do
    one=$(mpirun -np 1 build/bench_dist "$steps") || exit 1
    two=$(mpirun -np 2 --oversubscribe build/bench_dist "$steps") || exit 1
    echo "$one"
    echo "$two"
    a=$(echo "$one" | awk '$2 == "dp1_samples_per_s" {print $3}')
    b=$(echo "$two" | awk '$2 == "dp2_samples_per_s" {print $3}')
    awk -v a="$a" -v b="$b" 'BEGIN {printf "ratio dp2/dp1 throughput = %.3f (round '"$round"')\n", b / a}'
done
