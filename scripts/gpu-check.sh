#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, from a build made elsewhere
# and carried there: the GPU machine builds nothing (it may have no
# OpenBLAS, cJSON, protobuf-c or MPI, and reach no package registry).
#
#   scripts/gpu-check.sh --prepare [CARRY]
#       On the build machine (no GPU needed; nvcc on PATH): configures and
#       builds build-gpu, or the folder OAR_GPU_BUILD names (Release; MPI,
#       ONNX and oneDNN left out), then
#       copies into CARRY (default: build-gpu/carry, inside the ignored
#       build folder) the programs the checks run,
#       liboar, the cuda plugin and, in CARRY/lib, every shared library
#       they load that is neither the C library's nor the CUDA toolkit's
#       (OpenBLAS, LAPACKE, cJSON, libgomp, ...). CARRY/build-dir records
#       the build folder's absolute path. The CUDA 13 runtime, cuBLAS, NVRTC and
#       NCCL are not carried (hundreds of MB): the GPU machine needs them.
#       It also packs CARRY into CARRY.tar.xz (the folder is over 64 MiB,
#       the archive well under), which the run below takes as well.
#   scripts/gpu-check.sh [--carry CARRY|CARRY.tar.xz] [--no-dist] [--list]
#       On the GPU machine, from the repository root (default CARRY:
#       build-gpu/carry.tar.xz, else build-gpu/carry; an archive is first
#       unpacked into a temporary folder, removed on exit): runs the checks below
#       with OAR_REQUIRE_CUDA=1 (a refused plugin or a missing cuda:0 fails
#       a test instead of skipping it) and prints a table. Exits 0 when
#       every row passed; 1 when any row failed or was skipped; 2 on a
#       usage error; 3 when it cannot start (no CARRY, no GPU).
#       --no-dist leaves out the NCCL row (2 ranks need mpirun, and the
#       carried build has no MPI; without --no-dist that row fails).
#       --list prints the rows and exits.
#
# Rows: the cuda plugin test (claimed ops on cuda:0 against the CPU, no CPU
# fallback; a compiled graph's NVRTC kernels; stride-0 operands), again
# with the plugin's block cache off (OAR_CUDA_CACHE_BYTES=0), the
# cuBLAS plans and the cuFFT layouts (CPU models), every claimed kernel
# against the CPU (test_backend_ops: cuFFT, cuDNN and the pool and norm
# kernels among them), autograd through moves (on the mock device and
# OpenCL: it has no CUDA part yet, so it guards the rest), the CUDA C of the compiler
# compiled by NVRTC, the demo CNN (LeNet-5) trained on cuda:0 against the
# CPU with no op on the CPU (test_cuda_train; fails on any fallback), matmul
# at 2048 in f32 and bf16 through oar and through raw cuBLAS (GFLOP/s and
# their ratio, reported; the row fails when either product is wrong), NCCL
# collectives on 2 ranks (where MPI exists), and the MLP step on every
# device (bench_device: fails without a cuda:0 row). cuDNN is opened at run
# time: where libcudnn.so.9 is not on the library path, the folder of
# Python's nvidia-cudnn wheel is added to it (the "cudnn" line says which).
# The plugin is also run with cuFFT's path made to fail (it must load, run
# its other ops on cuda:0 and the FFT ops on the CPU) and with cuFFT found
# (the FFT ops on cuda:0; test_cuda_fft_open), and the char LM's training
# step in AMP bf16 (test_cuda_char_lm: a small model against the CPU, then
# a d768 x 6-layer one timed; fails on any fallback; its row reports
# tokens/s and MFU against the device's bf16 peak, OAR_PEAK_BF16_TFLOPS
# overriding the table).
set -u
cd "$(dirname "$0")/.." || exit 3
root=$PWD
tests="test_cuda_plugin test_cuda_plugin_host test_cuda_gemm_layout test_cuda_fft_layout test_cuda_fft_open test_backend_ops test_device_autograd test_cuda_codegen test_cuda_train test_cuda_char_lm"
progs="$tests bench_cuda_matmul bench_device"

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

prepare() {
    local build=${OAR_GPU_BUILD:-build-gpu}
    local carry=${1:-$build/carry}
    command -v nvcc >/dev/null || { echo "gpu-check --prepare: nvcc is not on PATH (the CUDA toolkit builds the plugin)"; return 3; }
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DOAR_WITH_MPI=OFF -DOAR_WITH_ONNX=OFF \
        -DOAR_WITH_DNNL=OFF -DOAR_BUILD_TESTS=ON >/dev/null || return 1
    cmake --build "$build" -j "$(nproc)" --target oar oar_cuda $progs >/dev/null || return 1 # (oar: liboar.so, carried)
    [ -f "$build/plugins/cuda.so" ] || { echo "gpu-check --prepare: the cuda plugin was not built"; return 1; }
    rm -rf "$carry" && mkdir -p "$carry/plugins" "$carry/lib" || return 1
    local p f
    for p in $progs; do cp "$build/$p" "$carry/" || return 1; done
    cp -P "$build"/liboar.so* "$carry/" && cp "$build/plugins/cuda.so" "$carry/plugins/" || return 1
    (cd "$build" && pwd) > "$carry/build-dir"
    # the libraries they load, less the C library's and the CUDA toolkit's
    for f in $(ldd "$carry"/liboar.so "$carry"/plugins/cuda.so "$carry"/test_* "$carry"/bench_* 2>/dev/null |
               awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
        case $(basename "$f") in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libcuda.so*) ;;
            libcudart*|libcublas*|libnvrtc*|libnccl*|libcufft*|libnvJitLink*|libcudnn*) ;;
            liboar*) ;;
            *) cp -L "$f" "$carry/lib/" || return 1;;
        esac
    done
    strip --strip-unneeded "$carry"/lib/*.so* "$carry"/plugins/*.so "$carry"/liboar.so.* 2>/dev/null
    for p in $progs; do strip --strip-unneeded "$carry/$p" 2>/dev/null; done
    tar -C "$(dirname "$carry")" -cf - "$(basename "$carry")" | xz -T2 -6 > "$carry.tar.xz" || return 1
    du -sh "$carry" "$carry.tar.xz" | awk '{print "gpu-check --prepare: " $2 ": " $1}'
    echo "gpu-check --prepare: carry $carry.tar.xz (the device tool carries 64 MiB at most)"
    ls "$carry/lib" | sed 's/^/  carried: /'
    return 0
}

carry=build-gpu/carry.tar.xz dist=1
[ -f "$carry" ] || carry=build-gpu/carry
case ${1:-} in
    --prepare) shift; [ $# -le 1 ] || { usage >&2; exit 2; }; prepare "${1:-}"; exit $?;;
    -h|--help) usage; exit 0;;
esac
while [ $# -gt 0 ]; do
    case $1 in
        --carry) [ $# -ge 2 ] && [ -n "$2" ] || { echo "gpu-check: --carry needs a folder" >&2; exit 2; }
                 carry=$2; shift 2;;
        --no-dist) dist=0; shift;;
        --list) echo "$tests" | tr ' ' '\n'; echo "test_cuda_plugin with OAR_CUDA_CACHE_BYTES=0"
                echo "test_cuda_fft_open --cufft absent, --cufft present"
                echo "bench_cuda_matmul 2048 (f32, bf16 against raw cuBLAS)"
                [ $dist = 1 ] && echo "test_dist_device --cuda (2 ranks)"; echo bench_device; exit 0;;
        *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2;;
    esac
done
case $carry in
    *.tar.xz) [ -f "$carry" ] || { echo "gpu-check: no archive '$carry' (make one with: scripts/gpu-check.sh --prepare)"; exit 3; }
              unpacked=$(mktemp -d) && trap 'rm -rf "$unpacked"' EXIT
              tar -C "$unpacked" -xJf "$carry" || { echo "gpu-check: cannot unpack '$carry'"; exit 3; }
              carry=$(ls -d "$unpacked"/*/ | head -1);;
esac
[ -d "$carry" ] && [ -f "$carry/build-dir" ] ||
    { echo "gpu-check: no carried build in '$carry' (make one with: scripts/gpu-check.sh --prepare)"; exit 3; }
carry=$(cd "$carry" && pwd)
for p in $progs; do [ -x "$carry/$p" ] || { echo "gpu-check: $carry/$p is missing (run --prepare again)"; exit 3; }; done
# (OAR_GPU_CHECK_NO_PROBE=1, for tests/devices/gpu_check_args.sh: run the
# rows without a GPU, which must then fail)
if [ "${OAR_GPU_CHECK_NO_PROBE:-0}" != 1 ] && { ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; }; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none): nothing was checked"
    exit 3
fi
# The programs name their build folder by absolute path (run path, plugin
# folder): make that path lead to the carried folder where it is free.
built=$(cat "$carry/build-dir")
# (where the build folder is there, holding only the archive: its plugins)
if [ -L "$built" ] || [ ! -e "$built" ]; then
    mkdir -p "$(dirname "$built")" 2>/dev/null && ln -sfn "$carry" "$built"
elif [ -d "$built" ] && [ ! -e "$built/plugins" ]; then
    ln -s "$carry/plugins" "$built/plugins" && trap 'rm -f "$built/plugins"; rm -rf "${unpacked:-}"' EXIT
fi
export LD_LIBRARY_PATH="$carry:$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OAR_PLUGIN_PATH="$carry/plugins" OAR_TEST_CUDA_PLUGIN="$carry/plugins/cuda.so" OAR_REQUIRE_CUDA=1
export OAR_CACHE_DIR="${TMPDIR:-/tmp}/oar-gpu-check-cache"
# cuDNN (opened by the plugin at run time) and cuFFT: where the library path
# lacks them, the folders of Python's nvidia wheels (the GPU image has them)
wheel_lib() { # wheel module (nvidia.cudnn) -> its lib folder, or nothing
    python3 -c "import $1 as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null
}
has_lib() { ldconfig -p 2>/dev/null | grep -q "$1" || ls /usr/local/cuda/lib64/"$1"* >/dev/null 2>&1; }
for pair in libcudnn.so.9:nvidia.cudnn libcufft.so.12:nvidia.cufft; do
    lib=${pair%%:*} mod=${pair#*:}
    if has_lib "$lib"; then echo "${lib%%.so*}: on the library path"; continue; fi
    dir=$(wheel_lib "$mod")
    if [ -n "$dir" ] && [ -e "$dir/$lib" ]; then
        export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"; echo "${lib%%.so*}: $dir (Python wheel)"
    else
        echo "${lib%%.so*}: not found (the ops it serves run on the CPU, and the CNN row fails on their fallbacks)"
    fi
done
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
row() { printf '%-34s %-8s %s\n' "$1" "$2" "$3"; }
run() { # name, command...
    local name=$1 out rc; shift
    out=$(cd "$root/tests" && timeout 240 "$@" 2>&1); rc=$?
    case $rc in
        0) row "$name" pass "$(echo "$out" | tail -1)";;
        77) row "$name" SKIPPED "$(echo "$out" | tail -1)"; status=1;;
        124) row "$name" FAIL "timed out after 240 s"; status=1;;
        *) row "$name" FAIL "exit $rc: $(echo "$out" | grep -m1 -i 'fail\|error' | cut -c1-160)"; status=1
           echo "$out" | grep -i 'fail\|error' | head -20 | sed 's/^/    /';;
    esac
}
row "check" "result" "detail"
run "cuda plugin" "$carry/test_cuda_plugin"
# again with the plugin's block cache off (exact-size cudaMalloc/cudaFree per buffer)
run "cuda plugin, no block cache" env OAR_CUDA_CACHE_BYTES=0 "$carry/test_cuda_plugin"
run "plugin host code (fake runtime)" "$carry/test_cuda_plugin_host"
run "cuBLAS plans (CPU model)" "$carry/test_cuda_gemm_layout"
run "backend ops (every claimed op)" "$carry/test_backend_ops"
run "autograd via moves (mock, OpenCL)" "$carry/test_device_autograd" # (no CUDA part: a regression row)
run "compiler CUDA C through NVRTC" "$carry/test_cuda_codegen"
run "cuFFT layouts (CPU model)" "$carry/test_cuda_fft_layout"
run "LeNet-5 CNN step, no fallback" "$carry/test_cuda_train"
run "char LM AMP bf16 step, no fallback" "$carry/test_cuda_char_lm"
run "plugin without cuFFT (loads)" "$carry/test_cuda_fft_open" --plugins "$carry/plugins" --cufft absent
run "cuFFT opened at run time" "$carry/test_cuda_fft_open" --plugins "$carry/plugins" --cufft present
# matmul through oar against raw cuBLAS: both products right, GFLOP/s and the ratio reported
mm=$(cd "$root/tests" && timeout 240 "$carry/bench_cuda_matmul" 2048 2>&1); rc=$?
for dt in f32 bf16; do
    line=$(echo "$mm" | grep -m1 "^matmul 2048 $dt ")
    if [ $rc = 0 ] && [ -n "$line" ] && echo "$line" | grep -q ': right$'; then
        ratio=$(echo "$line" | sed -n 's/.*ratio \([0-9.]*\).*/\1/p')
        target=$(awk -v r="${ratio:-0}" 'BEGIN {print (r >= 0.9) ? "target >= 0.9 met" : "target >= 0.9 NOT met"}')
        row "matmul 2048 $dt vs cuBLAS" pass "$(echo "$line" | sed 's/^.* on cuda:[0-9]*: //') ($target)"
    else
        row "matmul 2048 $dt vs cuBLAS" FAIL "exit $rc: ${line:-no $dt line}"; status=1
        echo "$mm" | tail -5 | sed 's/^/    /'
    fi
done
if [ $dist = 1 ]; then
    if [ -x "$carry/test_dist_device" ] && command -v mpirun >/dev/null; then
        run "NCCL collectives (2 ranks)" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            mpirun -n 2 --oversubscribe "$carry/test_dist_device" --cuda
    else
        row "NCCL collectives (2 ranks)" FAIL "not run: no MPI here or in the carried build (--no-dist leaves it out)"
        status=1
    fi
fi
bench=$(cd "$root/tests" && timeout 120 "$carry/bench_device" 20 2>/dev/null) || { row "MLP step (bench_device)" FAIL "exit $?"; status=1; }
echo "$bench" | awk '$1 == "oar" {printf "%-34s %-8s %s %s\n", $2, "time", $3, $4}'
echo "$bench" | grep '^#' | sed 's/^# //'
echo "$bench" | grep -q '^oar mlp_step_cuda:0 ' || { row "MLP step on cuda:0" FAIL "bench_device timed no cuda:0 step"; status=1; }
[ $status = 0 ] && echo "gpu-check: every check passed" || echo "gpu-check: FAILED (rows above)"
exit $status
