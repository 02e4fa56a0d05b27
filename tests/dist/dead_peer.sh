#!/usr/bin/env bash
# Runs test_dist_dead_peer on 3 ranks (OAR_DIST_TIMEOUT=3), one of which
# stops itself and one of which kills itself, and passes when the survivor
# (rank 0) reports that it finished within the timeout + 5 s and exits 0.
# Whatever is left (the stopped rank, mpirun) is killed afterwards.
#   dead_peer.sh MPIEXEC TEST_BINARY
set -u
mpiexec=$1
bin=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export OAR_DIST_TIMEOUT=3 OMP_NUM_THREADS=1
# recovery on: the death of rank 2 must not make mpirun kill the survivor
setsid "$mpiexec" -n 3 --oversubscribe --mca orte_enable_recovery 1 "$bin" >"$log" 2>&1 &
job=$!
deadline=$((SECONDS + 3 + 5 + 30)) # the bound, plus start-up and slack for a loaded machine
rc=1
while [ $SECONDS -lt $deadline ]; do
    if grep -q '^survivor finished' "$log"; then
        sleep 1 # let rank 0 print its summary and exit
        grep -q ' 0 failed' "$log" && rc=0
        break
    fi
    kill -0 $job 2>/dev/null || break
    sleep 0.5
done
kill -CONT -- -$job 2>/dev/null
kill -KILL -- -$job 2>/dev/null
wait $job 2>/dev/null
cat "$log"
[ $rc = 0 ] || echo "dead_peer: the survivor did not finish in time (or a check failed)"
exit $rc
