#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (the CUDA toolkit on PATH):
# builds oar with its CUDA plugin, runs the CUDA plugin test, the backend
# op test (every op the plugin claims against the CPU kernels), autograd
# through device moves and the dist test on 2 ranks (NCCL), then the MLP
# training step on every device, and prints a table. Under 5 minutes.
# OAR_REQUIRE_CUDA=1 makes every test fail, not skip, when the cuda plugin
# is refused or cuda:0 is missing; the script exits 1 when any row failed
# or was skipped (on a GPU machine nothing may skip).
#   bash scripts/gpu-check.sh
set -u
cd "$(dirname "$0")/.."
build=build-gpu
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DOAR_BUILD_TESTS=ON >/dev/null || exit 1
cmake --build "$build" -j "$(nproc)" --target test_cuda_plugin test_cuda_gemm_layout test_backend_ops test_device_autograd test_dist_device bench_device >/dev/null || exit 1
[ -f "$build/plugins/cuda.so" ] || { echo "gpu-check: the CUDA plugin was not built (is nvcc on PATH?)"; exit 1; }
export OAR_PLUGIN_PATH=$PWD/$build/plugins OAR_REQUIRE_CUDA=1
status=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
row() { printf '%-32s %-10s %s\n' "$1" "$2" "$3"; }
run() { # name, command...
    local name=$1; shift
    local out rc
    out=$(cd tests && timeout 240 "$@" 2>&1); rc=$?
    case $rc in 0) row "$name" pass "$(echo "$out" | tail -1)";;
                77) row "$name" SKIPPED "$(echo "$out" | tail -1)"; status=1;;
                *) row "$name" FAIL "exit $rc: $(echo "$out" | grep -m1 -i 'fail\|error')"; status=1;; esac
}
row "check" "result" "detail"
run "cuda plugin" ../"$build"/test_cuda_plugin
run "cuBLAS operand layouts" ../"$build"/test_cuda_gemm_layout
run "backend ops (all devices)" ../"$build"/test_backend_ops
run "autograd through moves" ../"$build"/test_device_autograd
# NCCL collectives on cuda:<rank> (staged where two ranks share one GPU)
run "dist on devices (2 ranks)" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -n 2 --oversubscribe ../"$build"/test_dist_device --cuda
bench=$("$build"/bench_device 20 2>/dev/null)
echo "$bench" | awk '$1 == "oar" {printf "%-32s %-10s %s %s\n", $2, "time", $3, $4}'
echo "$bench" | grep '^#' | sed 's/^# //'
[ $status = 0 ] && echo "gpu-check: every check passed" || echo "gpu-check: FAILED (rows above)"
exit $status
