#!/usr/bin/env bash
# scripts/gpu-check.sh on a machine without a GPU (ctest gpu_check_args):
# usage errors exit 2, a missing carried build exits 3 naming --prepare,
# and with a carried build but no GPU it exits 3 saying nothing was
# checked (never 0: a GPU check cannot pass where it did not run). With a
# GPU (nvidia-smi finds one) that case is not checked. Past the probe,
# with stub programs, a run without a cuda:0 step, with the NCCL row and
# no MPI, with a skipped test, with the plugin test failing with its
# block cache off, with a matmul product not said right, or with the CNN
# program failing, with the char LM program failing, or with the plugin
# failing without cuFFT exits 1; only all rows passing gives 0.
set -u
script="$(dirname "$0")/../../scripts/gpu-check.sh"
fails=0
expect() { # rc-wanted, text-wanted, args...
    local want=$1 text=$2 out rc; shift 2
    out=$(bash "$script" "$@" 2>&1); rc=$?
    if [ "$rc" != "$want" ] || ! grep -q -- "$text" <<<"$out"; then
        echo "FAIL: gpu-check.sh $* exited $rc (wanted $want) with: $out" | head -5
        fails=$((fails + 1))
    else
        echo "ok: gpu-check.sh $* -> $rc"
    fi
}
expect 2 "unknown argument '--bogus'" --bogus
expect 2 "--carry needs a folder" --carry
expect 2 "scripts/gpu-check.sh --prepare" --prepare a b
expect 0 "OAR_REQUIRE_CUDA=1" --help
expect 0 "test_dist_device --cuda" --list
out=$(bash "$script" --no-dist --list)
grep -q test_dist_device <<<"$out" && { echo "FAIL: --no-dist still lists the NCCL row"; fails=$((fails + 1)); }
expect 3 "make one with: scripts/gpu-check.sh --prepare" --carry /nonexistent-carry
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
expect 3 "no carried build in" --carry "$tmp" # (no build-dir: not a carried build)
echo /nonexistent > "$tmp/build-dir"
expect 3 "is missing (run --prepare again)" --carry "$tmp"
for p in test_cuda_plugin test_cuda_plugin_host test_cuda_gemm_layout test_cuda_fft_layout test_cuda_fft_open \
         test_backend_ops test_device_autograd test_cuda_codegen test_cuda_train test_cuda_char_lm bench_cuda_matmul \
         bench_device; do
    printf '#!/bin/sh\nexit 0\n' > "$tmp/$p" && chmod +x "$tmp/$p"
done
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo "a GPU is here: the no-GPU refusal is not checked"
else
    expect 3 "no NVIDIA GPU here" --carry "$tmp"
fi
# past the GPU probe (OAR_GPU_CHECK_NO_PROBE=1) with programs that all
# pass: still a failure, since no cuda:0 step was timed; a skipped test
# (exit 77) is a failure too
echo "$tmp/moved-build" > "$tmp/build-dir" # (a build folder path that is free: linked to the carry)
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "MLP step on cuda:0 .*FAIL" --carry "$tmp" --no-dist
printf '#!/bin/sh\necho "oar mlp_step_cuda:0 1.0 ms"\n' > "$tmp/bench_device"
# the matmul row wants both products said right: a silent bench fails it
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "matmul 2048 f32 vs cuBLAS *FAIL" --carry "$tmp" --no-dist
mm_line='matmul 2048 %s on cuda:0: oar 100 GFLOP/s, raw cuBLAS 100 GFLOP/s, ratio %s; oar vs cuBLAS 0, vs double 1e-07: %s'
printf '#!/bin/sh\nprintf "%s\\n%s\\n"\n' "$(printf "$mm_line" f32 1.000 right)" "$(printf "$mm_line" bf16 0.500 WRONG)" > "$tmp/bench_cuda_matmul"
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "matmul 2048 bf16 vs cuBLAS *FAIL" --carry "$tmp" --no-dist
printf '#!/bin/sh\nprintf "%s\\n%s\\n"\n' "$(printf "$mm_line" f32 1.000 right)" "$(printf "$mm_line" bf16 0.500 right)" > "$tmp/bench_cuda_matmul"
OAR_GPU_CHECK_NO_PROBE=1 expect 0 "bf16 vs cuBLAS *pass .*target >= 0.9 NOT met" --carry "$tmp" --no-dist
# the CNN row fails with its program (a fallback is a failure there)
printf '#!/bin/sh\necho "cuda:0: 3 ops ran on the CPU instead"; exit 1\n' > "$tmp/test_cuda_train"
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "LeNet-5 CNN step, no fallback *FAIL" --carry "$tmp" --no-dist
printf '#!/bin/sh\nexit 0\n' > "$tmp/test_cuda_train"
# the char LM row fails with its program (a fallback), and shows its last line (tokens/s, MFU)
printf '#!/bin/sh\necho "cuda:0: 2 ops ran on the CPU instead"; exit 1\n' > "$tmp/test_cuda_char_lm"
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "char LM AMP bf16 step, no fallback *FAIL" --carry "$tmp" --no-dist
printf '#!/bin/sh\necho "char lm step: 1000 tokens/s, MFU 12.0%% of 989.4"\n' > "$tmp/test_cuda_char_lm"
OAR_GPU_CHECK_NO_PROBE=1 expect 0 "char LM AMP bf16 step, no fallback *pass .*MFU 12.0%" --carry "$tmp" --no-dist
# the cuFFT rows: the absent mode is asked of the carried plugins
printf '#!/bin/sh\n[ "$4" = absent ] && exit 1\nexit 0\n' > "$tmp/test_cuda_fft_open"
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "plugin without cuFFT (loads) *FAIL" --carry "$tmp" --no-dist
printf '#!/bin/sh\nexit 0\n' > "$tmp/test_cuda_fft_open"
OAR_GPU_CHECK_NO_PROBE=1 expect 0 "every check passed" --carry "$tmp" --no-dist
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "NCCL collectives (2 ranks) *FAIL" --carry "$tmp"
# the plugin test's second row runs with the block cache off
printf '#!/bin/sh\n[ "${OAR_CUDA_CACHE_BYTES:-}" = 0 ] && exit 1\nexit 0\n' > "$tmp/test_cuda_plugin"
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "cuda plugin, no block cache *FAIL" --carry "$tmp" --no-dist
printf '#!/bin/sh\nexit 0\n' > "$tmp/test_cuda_plugin"
expect 0 "OAR_CUDA_CACHE_BYTES=0" --list
printf '#!/bin/sh\necho skipping\nexit 77\n' > "$tmp/test_backend_ops"
OAR_GPU_CHECK_NO_PROBE=1 expect 1 "backend ops.*SKIPPED" --carry "$tmp" --no-dist
[ $fails = 0 ] && echo "gpu_check_args: all passed" || echo "gpu_check_args: $fails failed"
[ $fails = 0 ]
