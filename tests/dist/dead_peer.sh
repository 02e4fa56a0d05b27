#!/usr/bin/env bash
# Runs test_dist_dead_peer on 3 ranks (OAR_DIST_TIMEOUT=3), one of which
# stops itself and one of which kills itself, and passes when the survivor
# (rank 0) reports that it finished within the timeout + 5 s, its error
# named both lost ranks, its checks passed, and its process then exited
# within 5 s (it must not hang in MPI_Finalize or at exit).
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
why="the survivor did not finish in time"
while [ $SECONDS -lt $deadline ]; do
    if grep -q '^survivor finished' "$log"; then
        why="a check of the survivor failed"
        pid=$(awk '$1 == "survivor" && $2 == "pid" {print $3}' "$log")
        # its process must be gone (or a zombie) within 5 s
        for _ in $(seq 50); do
            st=$(ps -o stat= -p "$pid" 2>/dev/null)
            case "$st" in ''|Z*) break ;; esac
            sleep 0.1
        done
        st=$(ps -o stat= -p "$pid" 2>/dev/null)
        case "$st" in
            ''|Z*) grep -q ' 0 failed' "$log" && grep -q 'world rank(s) 1, 2 did not answer' "$log" && rc=0 ;;
            *) why="the survivor (pid $pid) did not exit within 5 s of finishing" ;;
        esac
        break
    fi
    kill -0 $job 2>/dev/null || break
    sleep 0.5
done
kill -CONT -- -$job 2>/dev/null
kill -KILL -- -$job 2>/dev/null
wait $job 2>/dev/null
cat "$log"
[ $rc = 0 ] || echo "dead_peer: $why"
exit $rc
